package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// maxReason keeps reasons well inside what the API accepts.
const maxReason = 1000

// signal reports one signal, retrying while the control plane is away. A
// rejection is final and not an error of the agent: it is logged and the
// agent goes on. Only errors that end the run are returned.
func (a *Agent) signal(ctx context.Context, req agentapi.SignalRequest) error {
	if len(req.Reason) > maxReason {
		req.Reason = req.Reason[:maxReason]
	}
	err := a.retry(ctx, "signal "+req.Kind, func(ctx context.Context) error { return a.api.signal(ctx, req) })
	switch {
	case err == nil:
		a.log.Info("signalled", "kind", req.Kind, "job", req.Job, "reason", req.Reason)
		return nil
	case errors.Is(err, domain.ErrRejected):
		a.log.Warn("signal rejected by the control plane", "kind", req.Kind, "job", req.Job, "err", err)
		return nil
	case errors.Is(err, ErrInstanceEnded), errors.Is(err, ErrUnauthorized), errors.Is(err, ErrUnreachable),
		errors.Is(err, context.Canceled):
		return err
	}
	a.log.Error("signal refused", "kind", req.Kind, "job", req.Job, "err", err)
	return nil
}

// recoverInterruptedJob reports the job of a runner that was running when
// the agent stopped: that runner is gone, and its job with it.
func (a *Agent) recoverInterruptedJob(ctx context.Context) error {
	job, err := markedJob(a.cfg.StateDir)
	if err != nil || job == "" {
		return err
	}
	a.log.Warn("the agent stopped while a runner ran; reporting its job as failed", "job", job)
	err = a.signal(ctx, agentapi.SignalRequest{Kind: string(domain.SignalFailed), Job: job,
		Reason: "the agent restarted while the runner ran"})
	if err != nil {
		return err
	}
	a.clearJob()
	return nil
}

// clearJob removes the job mark. A mark that stays is not worth stopping
// for (a restart would only report its job again, and be told no): the
// next mark, in the same directory, will fail and say why.
func (a *Agent) clearJob() {
	if err := clearJob(a.cfg.StateDir); err != nil {
		a.log.Error("cannot clear the job mark", "err", err)
	}
}

// serve runs the runner for an assignment and reports registered,
// job-started and job-finished (or failed, when the runner ends before
// its job started with a non-zero status).
func (a *Agent) serve(ctx context.Context, ins agentapi.Instruction) error {
	job := ins.Job
	if job == "" {
		job = domain.JobKey(ins.JobID)
	}
	if err := markJob(a.cfg.StateDir, job); err != nil {
		return a.unmarkable(ctx, job, err)
	}
	rep := a.startReporter(ctx)
	// The runner may print its job's start before Start returns: job-started
	// waits for registered, so the control plane hears them in order.
	var gate sync.Mutex
	registered, started := false, false
	watch := &lineWatcher{pattern: a.jobStarted, out: a.output, onMatch: func() {
		a.jobRunning.Store(true)
		gate.Lock()
		defer gate.Unlock()
		if registered {
			rep.send(agentapi.SignalRequest{Kind: string(domain.SignalJobStarted), Job: job})
		} else {
			started = true
		}
	}}
	line := strings.ReplaceAll(a.cfg.RunnerCommand, JITConfigPlaceholder, ShellQuote(ins.JITConfig))
	p, err := a.cmd.Start(ctx, Command{Line: line, Dir: a.cfg.WorkDir, Env: a.cfg.Env, Output: watch})
	if err != nil {
		a.log.Error("runner did not start", "job", job, "err", err)
		rep.send(agentapi.SignalRequest{Kind: string(domain.SignalFailed), Job: job, Reason: "start runner: " + err.Error()})
		return a.endServe(rep)
	}
	a.log.Info("runner started", "job", job, "runner", ins.RunnerName)
	gate.Lock()
	rep.send(agentapi.SignalRequest{Kind: string(domain.SignalRegistered), Job: job})
	registered = true
	if started {
		rep.send(agentapi.SignalRequest{Kind: string(domain.SignalJobStarted), Job: job})
	}
	gate.Unlock()
	werr := p.Wait()
	watch.flush()
	a.jobRunning.Store(false)
	if ctx.Err() != nil {
		// The agent is stopping: the runner was stopped with it. The mark
		// stays, so the next run reports the job.
		rep.close()
		return ctx.Err()
	}
	reason := exitReason(werr)
	a.log.Info("runner exited", "job", job, "status", reason, "job_started", watch.matched())
	switch {
	case watch.matched() || werr == nil:
		rep.send(agentapi.SignalRequest{Kind: string(domain.SignalJobFinished), Job: job, Reason: reason})
	default:
		rep.send(agentapi.SignalRequest{Kind: string(domain.SignalFailed), Job: job,
			Reason: "runner exited before its job started: " + reason})
	}
	return a.endServe(rep)
}

// unmarkable reports failed for a job that could not be marked (a full
// disk, a directory made read-only). Without its mark, a job whose runner
// died with the agent would never be reported, so the runner does not
// start and the job goes back to its queue. Stopping instead would
// crash-loop the agent on the same assignment, reporting nothing.
func (a *Agent) unmarkable(ctx context.Context, job string, err error) error {
	a.log.Error("cannot mark the job in the state directory; not running its runner", "job", job, "err", err)
	return a.signal(ctx, agentapi.SignalRequest{Kind: string(domain.SignalFailed), Job: job, Reason: err.Error()})
}

// endServe waits for the serve's signals and clears the job mark.
func (a *Agent) endServe(rep *reporter) error {
	if err := rep.close(); err != nil {
		return err
	}
	a.clearJob()
	return nil
}

// release cleans up after a job and signals deregistered, so the control
// plane pools the instance. A just-in-time runner is removed by GitHub
// after its one job: there is no registration left to delete.
func (a *Agent) release(ctx context.Context) error {
	return a.stage(ctx, "cleanup", a.cfg.CleanupCommand, nil, domain.SignalDeregistered, "cleanup failed; the instance will not be reused")
}

// reporter sends one serve's signals in order, in the background, so the
// runner's output is never held up by the control plane.
type reporter struct {
	ch   chan agentapi.SignalRequest
	done chan struct{}
	err  error // the first error that ends the run
}

func (a *Agent) startReporter(ctx context.Context) *reporter {
	r := &reporter{ch: make(chan agentapi.SignalRequest, 8), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for req := range r.ch {
			if r.err != nil {
				continue // the run is ending: drop the rest
			}
			r.err = a.signal(ctx, req)
		}
	}()
	return r
}

func (r *reporter) send(req agentapi.SignalRequest) { r.ch <- req }

// close waits for the signals sent so far.
func (r *reporter) close() error {
	close(r.ch)
	<-r.done
	return r.err
}

// lineWatcher passes the runner's output on and calls onMatch once, at the
// first line matching pattern. Lines longer than its buffer are matched in
// pieces.
type lineWatcher struct {
	pattern *regexp.Regexp
	out     io.Writer
	onMatch func()

	mu   sync.Mutex
	buf  []byte
	seen bool
}

const maxLine = 64 << 10

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.out.Write(p) // output is best effort: never fail the runner
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.check(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLine {
		w.check(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *lineWatcher) check(line []byte) {
	if !w.seen && w.pattern.Match(line) {
		w.seen = true
		w.onMatch()
	}
}

// flush checks a last line without a newline.
func (w *lineWatcher) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.check(w.buf)
		w.buf = nil
	}
}

func (w *lineWatcher) matched() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}
