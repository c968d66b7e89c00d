package autoscale

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// TracePoint is one row of a demand trace: demand seen T seconds in.
type TracePoint struct {
	T      int64
	Demand int
}

// replayLine is one line of Replay's output; the field order is the format.
type replayLine struct {
	T       int64  `json:"t"`
	Demand  int    `json:"demand"`
	Current int    `json:"current"`
	Action  string `json:"action"`
	New     int    `json:"new"`
}

// ParseTrace reads a CSV trace of `t,demand` rows: t in whole seconds,
// strictly increasing; demand a whole number, not negative. Blank lines are
// ignored, and a first line whose first field starts with a letter (such as
// `t,demand`) is a header. Every bad row is reported, each by line number.
func ParseTrace(r io.Reader) ([]TracePoint, error) {
	var (
		points []TracePoint
		errs   []error
		seen   bool // a non-blank line has been read
	)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		first := !seen
		seen = true
		if first && startsWithLetter(text) {
			continue
		}
		pt, err := parseRow(text)
		if err == nil && len(points) > 0 && pt.T <= points[len(points)-1].T {
			err = fmt.Errorf("t=%d is not after the previous row's t=%d", pt.T, points[len(points)-1].T)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("trace line %d: %w", line, err))
			continue
		}
		points = append(points, pt)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return points, nil
}

func startsWithLetter(s string) bool {
	c := s[0] | 0x20 // lower case for ASCII letters
	return c >= 'a' && c <= 'z'
}

// maxTraceSeconds keeps t far inside what a time.Duration can hold.
const maxTraceSeconds = 1 << 32

func parseRow(text string) (TracePoint, error) {
	fields := strings.Split(text, ",")
	if len(fields) != 2 {
		return TracePoint{}, fmt.Errorf("want two fields t,demand, got %d in %q", len(fields), text)
	}
	tRaw, dRaw := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1])
	t, err := strconv.ParseInt(tRaw, 10, 64)
	if err != nil || t > maxTraceSeconds || t < -maxTraceSeconds {
		return TracePoint{}, fmt.Errorf("t %q is not a whole number of seconds", tRaw)
	}
	demand, err := strconv.Atoi(dRaw)
	if err != nil {
		return TracePoint{}, fmt.Errorf("demand %q is not a whole number", dRaw)
	}
	if demand < 0 {
		return TracePoint{}, fmt.Errorf("demand %d is negative", demand)
	}
	return TracePoint{T: t, Demand: demand}, nil
}

// Replay runs a demand trace (see ParseTrace) through Decide, starting from
// initial instances with no history, and writes one JSON object per row:
// {"t":60,"demand":5,"current":1,"action":"none","new":1}. The count
// changes the moment a decision is made, as if the platform obeyed at once.
// A bad trace produces no output at all.
func Replay(p Params, trace io.Reader, initial int, out io.Writer) error {
	points, err := ParseTrace(trace)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0).UTC()
	var st State
	current := initial
	enc := json.NewEncoder(out)
	for _, pt := range points {
		d := Decide(p, &st, epoch.Add(time.Duration(pt.T)*time.Second), pt.Demand, current)
		line := replayLine{T: pt.T, Demand: pt.Demand, Current: current, Action: d.Action, New: d.New}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write replay: %w", err)
		}
		current = d.New
	}
	return nil
}

// ReplayMain is `bullpen autoscale replay --trace FILE [--initial N]`; args
// are the arguments after "replay". It reads the parameters from the same
// environment variables as the standalone autoscaler. Exit status: 0 on
// success or --help, 1 for invalid parameters or a bad trace (every problem named on
// stderr), 2 for a usage error.
func ReplayMain(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bullpen autoscale replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tracePath := fs.String("trace", "", "CSV `FILE` of t,demand rows (t in seconds); - reads stdin")
	initial, initialSet := 0, false
	fs.Func("initial", "`N` instances at the start (default MIN_INSTANCES)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("want a whole number, 0 or more")
		}
		initial, initialSet = n, true
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bullpen autoscale replay --trace FILE [--initial N]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *tracePath == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}

	p, err := ParamsFromEnv(getenv)
	if err != nil {
		var perr *ParamsError
		if !errors.As(err, &perr) {
			printErr(stderr, err)
			return 1
		}
		fmt.Fprintln(stderr, "bullpen autoscale replay: invalid parameters:")
		for _, pr := range perr.Problems {
			fmt.Fprintln(stderr, "  "+pr.String())
		}
		return 1
	}
	if !initialSet {
		initial = p.MinInstances
	}

	in := stdin
	if *tracePath != "-" {
		f, err := os.Open(*tracePath)
		if err != nil {
			printErr(stderr, err)
			return 1
		}
		defer f.Close()
		in = f
	}
	if err := Replay(p, in, initial, stdout); err != nil {
		printErr(stderr, err)
		return 1
	}
	return 0
}

// printErr writes one line per joined error, so each bad trace row is its
// own line.
func printErr(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(w, "bullpen autoscale replay: "+line)
	}
}
