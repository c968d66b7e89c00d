// Package agent is the process that runs on each of bullpen's instances
// (`bullpen agent`): the other half of every handshake with the control
// plane. It introduces itself with its machine's bootstrap secret (given,
// or derived from its launch's) and keeps the token it gets, heartbeats,
// long-polls for instructions, runs the runner for each assigned job and
// reports every step, cleans up and signals deregistered when the instance
// is released for reuse, and shuts the machine down if the control plane
// stays unreachable too long (the self-termination safety net).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Deps is the agent's outside world, injected so tests run it in-process.
type Deps struct {
	Clock    domain.Clock
	HTTP     *http.Client // nil: a plain client
	Commands Commander    // nil: Exec{}
	Log      *slog.Logger // nil: slog.Default()
	Output   io.Writer    // the commands' output; nil discards it
	// Jitter spreads a backoff delay; nil picks uniformly in [d/2, d].
	Jitter func(d time.Duration) time.Duration
}

// Agent is one run of the agent.
type Agent struct {
	cfg        Config
	clk        domain.Clock
	cmd        Commander
	log        *slog.Logger
	output     io.Writer
	jitter     func(time.Duration) time.Duration
	hc         *http.Client
	api        client
	jobStarted *regexp.Regexp

	cloudID   string
	heartbeat time.Duration
	firstBoot bool // this run is in the machine's first boot
	// jobRunning: a runner has started its job (printed the job-started
	// line) and not exited. The unreachable deadline waits for it.
	jobRunning atomic.Bool
	reach      reachability
}

// New returns an agent for cfg, or why cfg cannot work.
func New(cfg Config, deps Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		return nil, errors.New("agent: no clock")
	}
	a := &Agent{cfg: cfg, clk: deps.Clock, cmd: deps.Commands, log: deps.Log, output: deps.Output,
		jitter: deps.Jitter, hc: deps.HTTP, heartbeat: cfg.HeartbeatEvery}
	if a.cmd == nil {
		a.cmd = Exec{}
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.reach.log = a.log
	if a.output == nil {
		a.output = io.Discard
	}
	if a.jitter == nil {
		a.jitter = func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	}
	if a.hc == nil {
		a.hc = &http.Client{}
	}
	base := strings.TrimSuffix(strings.TrimRight(cfg.URL, "/"), strings.TrimSuffix(agentapi.Prefix, "/"))
	a.api = client{base: base, http: a.hc}
	a.jobStarted = regexp.MustCompile(cfg.JobStartedPattern) // checked by Validate
	return a, nil
}

// Run runs the agent until ctx ends (nil), the instance ends
// (ErrInstanceEnded), the credentials are refused (ErrUnauthorized), or the
// control plane stays unreachable past the deadline (ErrUnreachable, after
// running the shutdown command).
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unlock, err := claimStateDir(a.cfg.StateDir)
	if err != nil {
		return a.finish(ctx, err)
	}
	defer unlock() // last: the shutdown command runs with the directory still held
	boot := bootID()
	if since := a.reach.keepIn(a.cfg.StateDir, boot); !since.IsZero() {
		a.log.Warn("the control plane has not answered since before this run; the deadline counts from then",
			"since", since, "deadline_at", since.Add(a.cfg.UnreachableDeadline))
	}
	if err := a.identify(ctx); err != nil {
		return a.finish(ctx, err)
	}
	if a.firstBoot, err = firstBoot(a.cfg.StateDir, a.cloudID, boot); err != nil {
		a.log.Warn("the warm-up is told this is the machine's first boot", "err", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // stops the heartbeats before waiting for them
	wg.Go(func() { a.heartbeats(ctx, cancel) })
	if a.cfg.CloudIDFrom == "imds" && a.cfg.SpotWatchEvery > 0 {
		wg.Go(func() { a.watchSpot(ctx) })
	}
	if err := a.recoverInterruptedJob(ctx); err != nil {
		return a.finish(ctx, err)
	}
	if err := a.warm(ctx); err != nil {
		return a.finish(ctx, err)
	}
	return a.finish(ctx, a.loop(ctx))
}

// loop asks for instructions and carries them out.
func (a *Agent) loop(ctx context.Context) error {
	for {
		var ins agentapi.Instruction
		err := a.retry(ctx, "next", func(ctx context.Context) error {
			var err error
			ins, err = a.api.next(ctx, a.cfg.PollWait)
			return err
		})
		if err != nil {
			return err
		}
		switch domain.InstructionKind(ins.Kind) {
		case domain.InstructionRun:
			err = a.serve(ctx, ins)
		case domain.InstructionRelease:
			err = a.release(ctx)
		case domain.InstructionWait:
		default:
			a.log.Warn("unknown instruction; asking again", "kind", ins.Kind)
			err = a.sleep(ctx, a.cfg.BackoffMin)
		}
		if err != nil {
			return err
		}
	}
}

// finish turns the reason the run stopped into Run's answer, and shuts the
// machine down when the control plane was lost.
func (a *Agent) finish(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the heartbeats learned that the instance ended
	}
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		a.log.Info("agent stopped")
		return nil
	case errors.Is(err, ErrInstanceEnded):
		a.log.Info("the instance has ended; agent done")
		return ErrInstanceEnded
	case errors.Is(err, ErrUnreachable):
		a.log.Error("control plane unreachable past the deadline; shutting the machine down",
			"deadline", a.cfg.UnreachableDeadline)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if serr := a.runCommand(sctx, "shutdown", a.cfg.ShutdownCommand); serr != nil {
			a.log.Error("shutdown command failed", "err", serr)
		}
		return err
	}
	a.log.Error("agent failed", "err", err)
	return err
}

// identify finds the machine's cloud id and the instance's token: saved by
// an earlier run, or from hello.
func (a *Agent) identify(ctx context.Context) error {
	a.cloudID = a.cfg.CloudID
	if a.cloudID == "" {
		err := a.retry(ctx, "metadata", func(ctx context.Context) error {
			var err error
			a.cloudID, err = CloudIDFromMetadata(ctx, a.hc, a.cfg.MetadataURL, a.cfg.CloudIDFrom)
			return err
		})
		if err != nil {
			return fmt.Errorf("cloud id: %w", err)
		}
	}
	saved, ok, err := loadIdentity(a.cfg.StateDir)
	if err != nil {
		return err
	}
	if ok && saved.CloudID == a.cloudID {
		a.adopt(saved)
		a.log.Info("using the saved instance token", "instance", saved.InstanceID, "cloud_id", a.cloudID)
		return nil
	}
	if ok {
		a.log.Warn("ignoring a saved token of another machine", "saved_cloud_id", saved.CloudID, "cloud_id", a.cloudID)
	}
	return a.hello(ctx)
}

func (a *Agent) hello(ctx context.Context) error {
	bootstrap := a.cfg.machineSecret(a.cloudID)
	if a.cfg.LaunchID == "" || bootstrap == "" {
		return fmt.Errorf("no saved token and no bootstrap credentials (launch id and secret): %w", ErrUnauthorized)
	}
	// The agent draws its token's secret itself, and keeps it until the
	// identity is saved, so that a retry of a hello whose answer was lost,
	// or a hello of an agent restarted before it saved the identity, is
	// given the same token again rather than refused. The token answered
	// (the instance's id and that secret) is saved and presented as is.
	token, err := proposedToken(a.cfg.StateDir, a.cloudID)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	req := agentapi.HelloRequest{CloudID: a.cloudID, LaunchID: a.cfg.LaunchID, Bootstrap: bootstrap, Token: token}
	if a.cfg.CloudIDFrom == "imds" {
		doc, sig, err := IdentityFromIMDS(ctx, a.hc, a.cfg.MetadataURL)
		if err != nil {
			return fmt.Errorf("hello: instance identity document: %w", err)
		}
		req.IdentityDocument, req.IdentitySignature = doc, sig
	}
	var resp agentapi.HelloResponse
	err = a.retry(ctx, "hello", func(ctx context.Context) error {
		var err error
		resp, err = a.api.hello(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	id := identity{CloudID: a.cloudID, InstanceID: resp.InstanceID, Token: resp.Token, HeartbeatSeconds: resp.HeartbeatSeconds}
	if err := saveIdentity(a.cfg.StateDir, id); err != nil {
		return err
	}
	if err := dropProposedToken(a.cfg.StateDir); err != nil {
		a.log.Warn("the proposed token's file could not be removed; the saved identity supersedes it", "err", err)
	}
	a.adopt(id)
	a.log.Info("introduced to the control plane", "instance", id.InstanceID, "cloud_id", a.cloudID)
	return nil
}

// adopt takes the identity's token, and its heartbeat interval unless the
// configuration sets one other than the default.
func (a *Agent) adopt(id identity) {
	a.api.token = id.Token
	if id.HeartbeatSeconds > 0 && a.cfg.HeartbeatEvery == DefaultHeartbeatEvery {
		a.heartbeat = time.Duration(id.HeartbeatSeconds) * time.Second
	}
}

// heartbeats says "alive" at once and then every interval. It is also how
// an agent with nothing to do learns that its instance has ended, and the
// watch on the unreachable deadline whatever else the agent is doing
// (waiting for a runner, running a command).
func (a *Agent) heartbeats(ctx context.Context, stop context.CancelCauseFunc) {
	var down time.Time // when heartbeats began to fail; zero while they are answered
	for {
		mark := a.reach.mark()
		err := a.api.heartbeat(ctx)
		switch {
		case err == nil:
			a.reach.ok(mark)
			if !down.IsZero() {
				a.log.Warn("the control plane answers heartbeats again", "after", a.clk.Now().Sub(down))
				down = time.Time{}
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrInstanceEnded), errors.Is(err, ErrUnauthorized):
			stop(err)
			return
		case transient(err):
			now := a.clk.Now()
			since, _ := a.reach.fail(now, answeredByControlPlane(err))
			if down.IsZero() {
				down = now
				a.log.Warn("the control plane does not answer heartbeats; the machine shuts down if this lasts past the deadline with no job running",
					"since", since, "deadline_at", since.Add(a.cfg.UnreachableDeadline), "err", err)
			} else {
				a.log.Debug("heartbeat not delivered", "err", err)
			}
			if a.givingUp(now, since) {
				stop(unreachable("heartbeat", since, err))
				return
			}
		default:
			a.log.Warn("heartbeat refused", "err", err)
		}
		if a.sleep(ctx, a.heartbeat) != nil {
			return
		}
	}
}

// FirstBootEnv is set for the warm-up command: "1" in the machine's first
// boot, "0" in any later one (a stopped machine started again), so that a
// warm-up can skip the work whose results the first left on the disk.
const FirstBootEnv = "BULLPEN_FIRST_BOOT"

// warm runs the warm-up command, then reports warm, or failed if it failed.
func (a *Agent) warm(ctx context.Context) error {
	first := "0"
	if a.firstBoot {
		first = "1"
	}
	return a.stage(ctx, "warm-up", a.cfg.WarmUpCommand, []string{FirstBootEnv + "=" + first}, domain.SignalWarm, "warm-up failed")
}

// stage runs the command of a stage of the instance's life (none when line
// is empty), with env added to the commands', then reports done, or logs
// failure and reports failed, with the stage and how its command ended as
// the reason, if it failed.
func (a *Agent) stage(ctx context.Context, name, line string, env []string, done domain.SignalKind, failure string) error {
	if line != "" {
		if err := a.runCommand(ctx, name, line, env...); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.log.Error(failure, "err", err)
			return a.signal(ctx, agentapi.SignalRequest{Kind: string(domain.SignalFailed), Reason: name + ": " + exitReason(err)})
		}
	}
	return a.signal(ctx, agentapi.SignalRequest{Kind: string(done)})
}

// runCommand runs a command to its end, its output to the agent's, with
// env added to the commands' environment.
func (a *Agent) runCommand(ctx context.Context, what, line string, env ...string) error {
	cenv := append(slices.Clip(a.cfg.Env), env...)
	p, err := a.cmd.Start(ctx, Command{Line: line, Dir: a.cfg.WorkDir, Env: cenv, Output: a.output})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
