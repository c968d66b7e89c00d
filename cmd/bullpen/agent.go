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
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

func init() {
	register("agent", "run the on-instance agent: hello, heartbeats, runs the runner, reports", cmdAgent)
}

// Exit codes of bullpen agent. The systemd unit of the launch data does not
// restart the agent after the final ones, and shuts the machine down after
// a refused credential or settings that cannot work: trying again mends
// neither. Settings that cannot work, whether from the config file, the
// environment or a flag, are EX_CONFIG (78), never 2: Go exits 2 after a
// panic, and a crash is a failure like any other, restarted. A config file
// that cannot be read is 1: it may be readable at the next start.
const (
	exitAgentOK           = 0 // stopped, or the instance ended
	exitAgentFailed       = 1
	exitAgentSettings     = launchdata.AgentExitSettings
	exitAgentUnauthorized = launchdata.AgentExitUnauthorized // credentials refused
	exitAgentShutdown     = launchdata.AgentExitShutdown     // control plane unreachable: the shutdown command ran
)

// agentExitStatuses ends bullpen agent -h.
var agentExitStatuses = fmt.Sprintf(`
Exit status: %d stopped, or the instance ended; 1 a failure (and 2, Go's, a
crash), which the launch data's unit restarts; %d credentials refused and %d
(EX_CONFIG) settings that cannot work, after which the unit shuts the machine
down; %d the control plane was unreachable and the shutdown command ran.
`, exitAgentOK, exitAgentUnauthorized, exitAgentSettings, exitAgentShutdown)

func cmdAgent(ctx context.Context, e *env, args []string) int {
	// The flag package's own output is the whole usage: on -h it goes to
	// standard output; after a wrong flag only the error is said.
	cfg, warnings, err := agent.LoadConfig(args, e.getenv, io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		_, _, _ = agent.LoadConfig(args, e.getenv, e.stdout)
		fmt.Fprint(e.stdout, agentExitStatuses)
		return exitAgentOK
	}
	if errors.Is(err, agent.ErrConfigUnreadable) {
		fmt.Fprintf(e.stderr, "bullpen agent: %v\n", err)
		return exitAgentFailed
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "bullpen agent: %v\nRun 'bullpen agent -h' for its flags.\n", err)
		return exitAgentSettings
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
		return exitAgentSettings
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
