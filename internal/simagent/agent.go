package simagent

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// phase is where an agent's main line of work is. Heartbeats run beside it.
type phase int

const (
	phaseBooting     phase = iota // warming up
	phaseReporting                // a signal must be accepted before the agent goes on
	phaseAsking                   // a Next call is in flight
	phaseWaiting                  // waiting for a notification or the next poll
	phaseRegistering              // registering a runner for the assignment
	phaseServing                  // the runner has, or is about to get, its job
	phaseReleasing                // deregistering the runner and cleaning up
)

// agent is one run of the agent on one machine: from the machine reaching
// running until it halts, or until the agent crashes. Every field is
// guarded by the fleet's mutex; every method named as a callback takes it.
type agent struct {
	f      *Fleet
	mc     *machine
	id     string
	ctx    context.Context // cancelled when the agent dies
	cancel context.CancelFunc
	dead   bool

	phase      phase
	woken      bool // a notification came while a Next call was in flight
	assignment domain.Assignment
	runner     *runner // the runner of the current assignment

	heartbeat domain.Timer
	step      domain.Timer // the next step of the main line
	outbox
}

// runner is one RunJIT call: its callbacks belong to it, so a late or
// repeated callback cannot act on a later job.
type runner struct {
	cancel   context.CancelFunc // ends the runner process
	job      int64              // the assigned job
	starting bool               // RunJIT has not returned yet
	held     []outgoing         // callbacks that came before RunJIT returned
	done     bool
}

func newAgent(f *Fleet, mc *machine) *agent {
	ctx, cancel := context.WithCancel(context.Background())
	return &agent{f: f, mc: mc, id: mc.id, ctx: ctx, cancel: cancel}
}

// start begins the run at at: the first heartbeat at once, warm after the
// warm-up. Called under f.mu.
func (a *agent) start(at time.Time) {
	if !a.mc.silent {
		a.heartbeat = a.f.after(at, 0, a.beat)
	}
	if !a.mc.neverWarm {
		warmUp := a.f.opts.WarmUp
		if w, ok := a.f.opts.FamilyWarmUp[a.mc.family]; ok {
			warmUp = w
		}
		if a.mc.runs > 1 {
			warmUp = a.f.opts.RestartWarmUp
		}
		a.step = a.f.after(at, warmUp, a.warm)
	}
}

// kill ends the run: no timer of it fires and nothing more is sent. A call
// already in flight completes, but nothing follows it. Called under f.mu.
func (a *agent) kill() {
	a.dead = true
	stop(&a.heartbeat)
	stop(&a.step)
	stop(&a.retry)
	a.outbox.queue = nil
	a.endRunner()
	a.cancel()
}

func stop(t *domain.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// beat sends one heartbeat and schedules the next.
func (a *agent) beat(due time.Time) {
	f := a.f
	f.mu.Lock()
	if a.dead || a.mc.silent {
		f.mu.Unlock()
		return
	}
	a.heartbeat = f.after(due, f.opts.HeartbeatEvery, a.beat)
	f.mu.Unlock()
	err := f.api.Heartbeat(a.ctx, a.id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.stats.HeartbeatErrors++
		f.log.Debug("heartbeat refused", "instance", a.id, "err", err)
		return
	}
	f.stats.Heartbeats++
}

// warm reports that warm-up finished, then asks what to do.
func (a *agent) warm(due time.Time) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.dead || a.mc.neverWarm {
		return
	}
	a.step = nil
	a.phase = phaseReporting
	a.send(due, outgoing{sig: domain.Signal{Kind: domain.SignalWarm}, then: a.askNext})
}

// askNext asks the control plane what to do and schedules it.
func (a *agent) askNext(due time.Time) {
	f := a.f
	f.mu.Lock()
	if a.dead {
		f.mu.Unlock()
		return
	}
	a.phase, a.woken, a.step = phaseAsking, false, nil
	f.stats.NextCalls++
	f.mu.Unlock()

	ins, err := f.api.Next(a.ctx, a.id)

	f.mu.Lock()
	defer f.mu.Unlock()
	if a.dead {
		return
	}
	switch {
	case err != nil:
		f.log.Debug("next instruction not given", "instance", a.id, "err", err)
		a.phase = phaseWaiting
		a.step = f.after(due, f.opts.RetryEvery, a.askNext)
	case ins.Kind == domain.InstructionRun:
		a.phase, a.assignment = phaseRegistering, ins.Assignment
		a.step = f.after(due, a.registerDelay(), a.register)
	case ins.Kind == domain.InstructionRelease:
		a.phase = phaseReleasing
		a.step = f.after(due, f.opts.DeregisterDelay, a.deregister)
	default: // wait, or an instruction this agent does not know
		a.phase = phaseWaiting
		delay := f.opts.PollEvery
		if a.woken { // the notification raced this call's answer: ask again now
			delay = 0
		}
		a.step = f.after(due, delay, a.askNext)
	}
}

// wake answers a notification: a waiting agent asks at once; one asking
// now asks again when the answer is "wait". Called under f.mu.
func (a *agent) wake() {
	switch a.phase {
	case phaseWaiting:
		// A timer that already fired means the ask is on its way.
		if a.step != nil && a.step.Stop() {
			a.step = a.f.after(a.f.clk.Now(), 0, a.askNext)
		}
	case phaseAsking:
		a.woken = true
	}
}

func (a *agent) registerDelay() time.Duration {
	if a.mc.delaySet {
		return a.mc.registerDelay
	}
	return a.f.opts.RegisterDelay
}

// register starts the runner for the assignment and reports the outcome.
func (a *agent) register(due time.Time) {
	f := a.f
	f.mu.Lock()
	if a.dead {
		f.mu.Unlock()
		return
	}
	a.step = nil
	job := domain.JobKey(a.assignment.JobID)
	if reason := a.mc.failReason; reason != "" {
		defer f.mu.Unlock()
		a.failed(due, job, reason)
		return
	}
	a.endRunner()
	ctx, cancel := context.WithCancel(a.ctx)
	r := &runner{cancel: cancel, job: a.assignment.JobID, starting: true}
	a.runner, a.phase = r, phaseServing
	jit := a.assignment.JITConfig
	f.mu.Unlock()

	err := f.host.RunJIT(ctx, jit,
		func(jobID int64) { a.jobStarted(r, jobID) },
		func(jobID int64, conclusion string) { a.jobDone(r, jobID, conclusion) })

	f.mu.Lock()
	defer f.mu.Unlock()
	r.starting = false
	if a.dead || a.runner != r {
		return
	}
	if err != nil {
		a.endRunner()
		a.failed(due, job, "start runner: "+err.Error())
		return
	}
	a.send(due, outgoing{sig: domain.Signal{Kind: domain.SignalRegistered, Job: job}})
	for _, o := range r.held {
		a.send(due, o)
	}
	r.held = nil
}

// failed reports a failed registration, then asks what to do: the control
// plane decides the machine's fate. Called under f.mu.
func (a *agent) failed(due time.Time, job, reason string) {
	a.phase = phaseReporting
	a.send(due, outgoing{
		sig:  domain.Signal{Kind: domain.SignalFailed, Job: job, Reason: reason},
		then: a.askNext,
	})
}

func (a *agent) jobStarted(r *runner, jobID int64) {
	a.runnerEvent(r, domain.Signal{Kind: domain.SignalJobStarted}, jobID, nil)
}

// jobDone reports the runner's exit, as a real agent does: the job's
// conclusion is GitHub's to give, in its completed delivery.
func (a *agent) jobDone(r *runner, jobID int64, conclusion string) {
	reason := "runner exited"
	if conclusion != "" {
		reason += " (job " + conclusion + ")"
	}
	a.runnerEvent(r, domain.Signal{Kind: domain.SignalJobFinished, Reason: reason}, jobID, a.askNext)
}

// runnerEvent reports what the runner did, for jobID or, when the host
// names no job (a runner removed before or during its job), the assigned
// one. The job-finished report (then set) is the runner's last. A callback
// that comes while RunJIT is still running waits for the registered signal,
// so the control plane always hears registered, job-started, job-finished
// in that order.
func (a *agent) runnerEvent(r *runner, sig domain.Signal, jobID int64, then func(time.Time)) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.dead || a.runner != r || r.done {
		return
	}
	if jobID <= 0 {
		jobID = r.job
	}
	sig.Job = domain.JobKey(jobID)
	o := outgoing{sig: sig, then: then}
	if then != nil {
		r.done = true
		a.phase = phaseReporting
	}
	if r.starting {
		r.held = append(r.held, o)
		return
	}
	a.send(f.clk.Now(), o)
}

// endRunner stops the current runner's process, if any. Called under f.mu.
func (a *agent) endRunner() {
	if a.runner != nil {
		a.runner.cancel()
		a.runner = nil
	}
}

// deregister reports that the runner is gone and the machine clean, then
// asks for the next job.
func (a *agent) deregister(due time.Time) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.dead {
		return
	}
	a.step = nil
	a.endRunner()
	a.phase = phaseReporting
	a.send(due, outgoing{sig: domain.Signal{Kind: domain.SignalDeregistered}, then: a.askNext})
}

// after calls fn at at+d on the clock, or at once when that has passed,
// passing the instant it was due. Called under f.mu: the clock runs fn in
// its own goroutine.
func (f *Fleet) after(at time.Time, d time.Duration, fn func(due time.Time)) domain.Timer {
	due, now := at.Add(d), f.clk.Now()
	if due.Before(now) {
		due = now
	}
	return f.clk.AfterFunc(due.Sub(now), func() { fn(due) })
}
