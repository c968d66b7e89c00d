package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Command is one shell command line for the agent to run.
type Command struct {
	Line   string    // run with /bin/sh -c
	Dir    string    // "" is the agent's working directory
	Env    []string  // KEY=VALUE pairs added to the environment
	Output io.Writer // receives stdout and stderr; nil discards them
}

// Process is a started command.
type Process interface {
	// Wait waits for the command to exit; a non-zero exit is an error.
	Wait() error
}

// Commander starts commands. Cancelling ctx stops the command.
type Commander interface {
	Start(ctx context.Context, c Command) (Process, error)
}

// Exec runs real processes. A command is stopped with SIGTERM to it and
// every process below it, and SIGKILL to those left after Grace
// (DefaultStopGrace when zero). Commands do not inherit the agent's own
// BULLPEN_AGENT_* variables: the bootstrap secret stays with the agent.
// They stay in the agent's process group, so killing that group (as a
// supervisor does) leaves none of them behind; on Linux, the direct child
// is also killed if the agent dies.
type Exec struct {
	Grace time.Duration
}

// DefaultStopGrace is how long a stopped command has to exit before it is
// killed.
const DefaultStopGrace = 10 * time.Second

var _ Commander = Exec{}

func (e Exec) Start(ctx context.Context, c Command) (Process, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.Line)
	cmd.Dir = c.Dir
	cmd.Env = append(childEnv(os.Environ()), c.Env...)
	out := c.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	grace := e.Grace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error {
		stopTree(cmd.Process.Pid, grace)
		return nil
	}
	// Wait gives up on output held open by orphans shortly after the kill.
	cmd.WaitDelay = grace + time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// childEnv drops the agent's own settings from an environment.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// exitReason says how a command ended, for a signal's reason.
func exitReason(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.String()
	}
	return err.Error()
}
