package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// scaledDriver runs the app's own loops on a scaled wall clock.
type scaledDriver struct{ c *clock.Scaled }

func (d *scaledDriver) run(ctx context.Context, w *world, end time.Time) error {
	if !w.rollAt.IsZero() {
		t := d.c.AfterFunc(w.rollAt.Sub(d.c.Now()), func() { w.roll(w.lines) })
		defer t.Stop()
	}
	loops, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.a.Run(loops)
	}()
	select {
	case <-ctx.Done():
	case <-w.served:
	case <-d.c.After(end.Sub(d.c.Now())):
	}
	w.pace.stop(d.c.Now())
	stop()
	<-done
	return nil
}

// virtualDriver runs every loop step by step on a serial virtual clock,
// advancing from timer to timer; each step's effects settle before time
// moves on, and the callbacks and provisioning tasks take turns in a fixed
// order, so a run takes seconds and comes out the same each time.
type virtualDriver struct{ c *clock.Virtual }

const terminateEvery = 5 * time.Second

func (d *virtualDriver) run(ctx context.Context, w *world, end time.Time) error {
	provisioning, stopProvisioning := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopProvisioning() // cuts short waits for registrations that virtual time will not bring
		d.c.Settle()
	}()
	nextCycle, nextSweep := d.c.Now(), d.c.Now()
	for ctx.Err() == nil {
		now := d.c.Now()
		if !now.Before(end) {
			return nil
		}
		if !now.Before(nextCycle) {
			w.maybeRoll(now)
			rep, err := w.a.Converger.Cycle(ctx)
			if ctx.Err() != nil {
				return nil // interrupted: Run tells by the clock
			}
			if err != nil {
				// Going on would serve jobs with the pools as they were;
				// stopping quietly would pass the run off as complete.
				return fmt.Errorf("converger cycle at %s: %w", now.Format(time.RFC3339), err)
			}
			w.a.NoteCycle(rep)
			if w.isServed() {
				return nil
			}
			nextCycle = now.Add(w.interval)
		}
		d.serveJobs(ctx, provisioning, w)
		if !now.Before(nextSweep) {
			w.a.Agents.FlushHeartbeats(ctx)
			w.a.Terminator.Expire(ctx)
			w.a.Terminator.Sweep(ctx)
			nextSweep = now.Add(terminateEvery)
		}
		d.advance(earliest(nextCycle, nextSweep, end))
	}
	return nil
}

// serveJobs runs the job path until it has nothing left to do now; each
// received launch batch is provisioned as a task of the clock.
func (d *virtualDriver) serveJobs(ctx, provisioning context.Context, w *world) {
	for ctx.Err() == nil {
		n, err := w.a.Intake.Step(ctx)
		w.stepFailed("intake", err)
		r, err := w.a.Dispatcher.Step(ctx)
		w.stepFailed("dispatch", err)
		msgs, err := w.a.Queue.Receive(ctx, domain.QueueLaunch, 100, 5*time.Minute, 0)
		w.stepFailed("launch queue", err)
		if len(msgs) > 0 {
			d.c.Go(func() { w.stepFailed("provision", w.a.Provisioner.Serve(provisioning, msgs)) })
		}
		if n+r.Received+len(msgs) == 0 {
			return
		}
		d.c.Settle()
	}
}

// advance moves the clock to the next timer, or to limit if that comes
// first, and lets what fired settle.
func (d *virtualDriver) advance(limit time.Time) {
	t := limit
	if next, ok := d.c.Next(); ok && next.Before(t) {
		t = next
	}
	d.c.AdvanceTo(t)
	d.c.Settle()
}

func earliest(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}
