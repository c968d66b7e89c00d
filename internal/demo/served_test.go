package demo

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// onePoolConfig is one production pool keeping one hot instance.
func onePoolConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("p.yml", []byte("runners:\n  small: {image: ubuntu24-full-x64, ram: 1, family: [t3]}\n"+
		"pools:\n  p:\n    runner: small\n    schedule:\n      - name: default\n        hot: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func totalHours(hours []InstanceHours) float64 {
	sum := 0.0
	for _, h := range hours {
		sum += h.Hours
	}
	return sum
}

// Time before BillFrom is not billed: a run billed from its tenth minute
// bills what a whole run does less what one ending then does (the runs
// are deterministic, so the same up to then).
func TestBillingBeginsAtBillFrom(t *testing.T) {
	run := func(d time.Duration, from time.Time) float64 {
		t.Helper()
		res, err := Run(context.Background(), Options{Config: onePoolConfig(t), Duration: d, Start: monday, BillFrom: from, Latency: DefaultLatency})
		if err != nil {
			t.Fatal(err)
		}
		return totalHours(res.InstanceHours)
	}
	from := monday.Add(10 * time.Minute)
	// A run of 10m30s ends before its cycle at 10:30: it samples the
	// instances up to 10:00, as the run billed from then does not.
	whole, before := run(20*time.Minute, time.Time{}), run(10*time.Minute+30*time.Second, time.Time{})
	if got, want := run(20*time.Minute, from), whole-before; got < want-1e-9 || got > want+1e-9 || got >= whole {
		t.Errorf("%.4f instance-hours billed from the tenth minute, want %.4f: %.4f in all less %.4f before", got, want, whole, before)
	}
}

// A run that ends when served stops at the first cycle after its last
// job completed, not at its duration, and is no interruption.
func TestARunEndsWhenEveryJobIsServed(t *testing.T) {
	job := func(at time.Duration, id int64) Scheduled {
		return Scheduled{At: at, Job: ghsim.JobSpec{Repo: "acme/app", Name: "test", RunID: 800 + id,
			Labels: []string{"runs-on=" + ghsim.RunIDExpr + "/pool=p"}, Duration: 2 * time.Minute}}
	}
	const interval = 30 * time.Second
	res, err := Run(context.Background(), Options{Config: onePoolConfig(t), Duration: 2 * time.Hour, Start: monday, Interval: interval,
		Scheduled: []Scheduled{job(time.Minute, 1), job(3*time.Minute, 2)}, EndWhenServed: true, Latency: DefaultLatency})
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, r := range res.Stream {
		if r.CompletedAt.After(last) {
			last = r.CompletedAt
		}
	}
	if res.Jobs.ByStatus["completed"] != 2 || last.IsZero() {
		t.Fatalf("jobs %+v: want both completed", res.Jobs.ByStatus)
	}
	if res.Interrupted || res.End.Before(last) || res.End.Sub(last) > interval {
		t.Errorf("ended at %s (interrupted %v), the last job completed at %s: want the first cycle after it",
			res.End.Format(time.TimeOnly), res.Interrupted, last.Format(time.TimeOnly))
	}
	if want := res.End.Sub(monday).Round(time.Second).String(); res.Virtual != want {
		t.Errorf("virtual duration %s, want %s", res.Virtual, want)
	}
}

// A job a spot interruption failed is not served while it waits for its
// re-run, nor is a job still open; one re-run, or one whose runner does
// not re-run, is.
func TestAJobWaitingForItsRerunIsNotServed(t *testing.T) {
	ctx := context.Background()
	w := onePoolWorld(t)
	if !w.allServed(ctx, monday) {
		t.Fatal("a run without jobs is not served")
	}
	failed := domain.Job{ID: 1, RunID: 1, RunAttempt: 1, Repo: "acme/app", Status: domain.JobCompleted, Conclusion: "failure",
		Interrupted: true, CreatedAt: monday, UpdatedAt: monday, QueuedAt: monday}
	if _, err := w.a.Store.CreateJobs(ctx, []domain.Job{failed}); err != nil {
		t.Fatal(err)
	}
	if w.allServed(ctx, monday.Add(time.Minute)) {
		t.Error("served while an interrupted job waits for its re-run")
	}
	if _, err := w.a.Store.TransitionJob(ctx, 1, domain.JobGuard{Status: domain.JobCompleted}, func(j *domain.Job) { j.Rerun = true }); err != nil {
		t.Fatal(err)
	}
	if !w.allServed(ctx, monday.Add(time.Minute)) {
		t.Error("not served once the interrupted job is re-run")
	}
	open := domain.Job{ID: 2, RunID: 2, RunAttempt: 1, Repo: "acme/app", Status: domain.JobQueued, CreatedAt: monday, UpdatedAt: monday, QueuedAt: monday}
	if _, err := w.a.Store.CreateJobs(ctx, []domain.Job{open}); err != nil {
		t.Fatal(err)
	}
	if w.allServed(ctx, monday.Add(time.Minute)) {
		t.Error("served while a job is queued")
	}

	never := failed
	never.Spec.Retry = domain.RetryNever
	for name, c := range map[string]struct {
		job  domain.Job
		at   time.Time
		want bool
	}{
		"failed":             {failed, monday, true},
		"runner never":       {never, monday, false},
		"ran to its end":     {func() domain.Job { j := failed; j.Conclusion = "success"; return j }(), monday, false},
		"given up after 24h": {failed, monday.Add(domain.RerunWithin), false},
		"not interrupted":    {func() domain.Job { j := failed; j.Interrupted = false; return j }(), monday, false},
	} {
		if got := c.job.AwaitsRerun(c.at); got != c.want {
			t.Errorf("%s: awaits its re-run %v, want %v", name, got, c.want)
		}
	}
}

// onePoolWorld is a quiet world of onePoolConfig's pool on a serial clock
// set to monday, closed when the test ends.
func onePoolWorld(t *testing.T) *world {
	t.Helper()
	clk := clock.NewSerial(monday)
	w, err := newWorld(context.Background(), Options{Config: onePoolConfig(t), Environment: "production", Interval: 30 * time.Second,
		Latency: DefaultLatency, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, clk, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}
