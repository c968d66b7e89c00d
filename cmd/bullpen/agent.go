package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/clock"
)

func init() {
	register("agent", "run the on-instance agent: hello, heartbeats, runs the runner, reports", cmdAgent)
}

// Exit codes of bullpen agent. The systemd unit of the launch data does not
// restart the agent after 2, 3 or 4: neither settings that cannot work, a
// refused credential nor a shutdown gets better by trying again. A config
// file that cannot be read is 1: it may be readable at the next start.
const (
	exitAgentOK           = 0 // stopped, or the instance ended
	exitAgentFailed       = 1
	exitAgentUsage        = 2
	exitAgentUnauthorized = 3 // credentials refused
	exitAgentShutdown     = 4 // control plane unreachable: the shutdown command ran
)

func cmdAgent(ctx context.Context, e *env, args []string) int {
	// The flag package's own output is the whole usage: on -h it goes to
	// standard output; after a wrong flag only the error is said.
	cfg, warnings, err := agent.LoadConfig(args, e.getenv, io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		_, _, _ = agent.LoadConfig(args, e.getenv, e.stdout)
		return exitAgentOK
	}
	if errors.Is(err, agent.ErrConfigUnreadable) {
		fmt.Fprintf(e.stderr, "bullpen agent: %v\n", err)
		return exitAgentFailed
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "bullpen agent: %v\nRun 'bullpen agent -h' for its flags.\n", err)
		return exitAgentUsage
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}
	a, err := agent.New(cfg, agent.Deps{
		Clock:    clock.Real{},
		HTTP:     &http.Client{Transport: http.DefaultTransport},
		Commands: agent.Exec{},
		Log:      log,
		Output:   e.stderr,
	})
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen agent:", err)
		return exitAgentUsage
	}
	switch err := a.Run(ctx); {
	case err == nil, errors.Is(err, agent.ErrInstanceEnded):
		return exitAgentOK
	case errors.Is(err, agent.ErrUnauthorized):
		return exitAgentUnauthorized
	case errors.Is(err, agent.ErrUnreachable):
		return exitAgentShutdown
	default:
		return exitAgentFailed
	}
}
