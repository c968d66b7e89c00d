// Command bullpen keeps self-hosted GitHub Actions runners warm and hands
// every queued job a runner in seconds. One binary: the control plane, the
// on-instance agent, and the operator's tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // schedules resolve IANA zones even where the system has none
)

// command is one subcommand: it parses its own flags from args and returns
// the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is the process's outside world, injected so commands are testable.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// environ lists the variables as KEY=VALUE; nil for none.
	environ func() []string
	// now is the wall clock; tests fix it.
	now func() time.Time
}

// clock is e.now, or the wall clock.
func (e *env) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, env *env, args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := untilSignalled(context.Background())
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ}, os.Args[1:])
	stop()
	os.Exit(code)
}

// untilSignalled is parent, ended by the first SIGINT or SIGTERM. The
// signals have Go's default handling back before it ends, so that a second
// one ends the process at once: a shutdown may take twice serve's grace,
// and one that hangs could otherwise be ended only by SIGKILL.
func untilSignalled(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-signals:
			signal.Stop(signals)
			cancel(fmt.Errorf("%v received", s))
		case <-ctx.Done():
			signal.Stop(signals)
		}
	}()
	return ctx, func() { cancel(nil) }
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr) // a usage error, as for the subcommands: a script calling it by mistake learns so
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "bullpen: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return 2
	}
	return cmd.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bullpen COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'bullpen COMMAND -h' for a command's flags.")
}

// variables lists the environment as KEY=VALUE.
func (e *env) variables() []string {
	if e.environ == nil {
		return nil
	}
	return e.environ()
}

// flags is a command's flag set: a wrong flag is returned to the command
// rather than ending the process, and the flag package's messages go to
// the command's standard error.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parseFlags parses args into fs, a command taking flags only, and says
// whether the command goes on; when it does not, status is the exit code.
func (e *env) parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	return e.parseArgs(fs, args, 0)
}

// parseArgs is parseFlags for a command that takes up to most arguments
// besides its flags. -h prints the usage on standard output (exit 0). A
// wrong flag is said on standard error with where to find the flags (exit
// 2): the whole usage after it would scroll it away. An argument too many
// is refused (exit 2): the flag package stops at the first word that is
// not a flag, and every flag after it would be silently ignored.
func (e *env) parseArgs(fs *flag.FlagSet, args []string, most int) (status int, ok bool) {
	name := strings.TrimPrefix(fs.Name(), "bullpen ")
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(e.stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		defer fs.SetOutput(e.stderr)
		if fs.Usage != nil {
			fs.Usage()
		} else {
			fmt.Fprintf(e.stdout, "usage: bullpen %s [flags]\n\n", name)
			fs.PrintDefaults()
		}
		return 0, false
	case err != nil:
		fmt.Fprintf(e.stderr, "bullpen %s: %v\nRun 'bullpen %s -h' for its flags.\n", name, explainFlagError(fs, err), name)
		return 2, false
	case fs.NArg() > most:
		fmt.Fprintf(e.stderr, "bullpen %s: unexpected argument %s: the flags after it were not read (quote a value that holds spaces). Run 'bullpen %s -h' for its flags.\n",
			name, strayArgument(args, len(args)-fs.NArg()+most), name)
		return 2, false
	}
	return 0, true
}

// strayArgument names args[at], the first word that is not a flag, quoted,
// unless it follows a flag of a secret: "--admin-token my secret" would
// print part of the token.
func strayArgument(args []string, at int) string {
	for i := at - 1; i >= 0; i-- {
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		flagName, _, _ := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		for _, secret := range []string{"secret", "token", "key"} {
			if strings.Contains(flagName, secret) && !strings.HasSuffix(flagName, "-file") {
				return "after --" + flagName + " (not shown: it may be part of a secret)"
			}
		}
		break
	}
	return strconv.Quote(args[at])
}

// badValue finds the flag and value of the flag package's message for a
// value it could not parse, which for a duration says only "parse error".
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): `)

// explainFlagError adds what a duration flag wants to the flag package's
// message for a value it could not parse.
func explainFlagError(fs *flag.FlagSet, err error) string {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	if f := fs.Lookup(m[2]); f != nil {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return err.Error()
		}
		if _, isDuration := g.Get().(time.Duration); isDuration {
			return fmt.Sprintf("--%s %q: want a duration with its unit, such as 30s, 5m or 1h30m", m[2], m[1])
		}
	}
	return err.Error()
}

// checkRate is the problem of a rate flag (a speed, jobs a minute): it
// must be a number not below 0, and NaN and the infinities are not meant.
func checkRate(flag string, v float64) error {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("--%s %v: want a number not below 0", flag, v)
	}
	return nil
}

// subcommand is a command's subcommand.
type subcommand func(ctx context.Context, e *env, args []string) int

// dispatch runs the subcommand of name that args[0] names, printing usage
// for help (exit 0), and for none or an unknown one (exit 2).
func dispatch(ctx context.Context, e *env, name string, args []string, usage func(io.Writer), subs map[string]subcommand) int {
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	if run, ok := subs[args[0]]; ok {
		return run(ctx, e, args[1:])
	}
	switch args[0] {
	case "help", "-h", "--help":
		usage(e.stdout)
		return 0
	}
	fmt.Fprintf(e.stderr, "bullpen %s: unknown subcommand %q\n\n", name, args[0])
	usage(e.stderr)
	return 2
}
