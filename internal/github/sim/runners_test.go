package sim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

func TestRunnerGetsAJobOnlyWithAllItsLabels(t *testing.T) {
	tests := []struct {
		name         string
		scope        domain.Scope
		runnerLabels []string
		jobRepo      string
		jobLabels    []string
		takes        bool
	}{
		{"same labels", org, []string{"linux", "x64"}, "acme/app", []string{"linux", "x64"}, true},
		{"runner has more", org, []string{"self-hosted", "linux", "x64"}, "acme/app", []string{"linux"}, true},
		{"labels differ in case", org, []string{"Pool=Small"}, "acme/app", []string{"pool=small"}, true},
		{"runner lacks one", org, []string{"linux"}, "acme/app", []string{"linux", "gpu"}, false},
		{"subset label is not enough", org, []string{"runs-on/pool=small"}, "acme/app", []string{"runs-on=42/pool=small"}, false},
		{"job of another owner", org, []string{"linux"}, "other/app", []string{"linux"}, false},
		{"repository runner, its repository", domain.Scope{Owner: "acme", Repo: "app"}, []string{"linux"}, "acme/app", []string{"linux"}, true},
		{"repository runner, another repository", domain.Scope{Owner: "acme", Repo: "web"}, []string{"linux"}, "acme/app", []string{"linux"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Both orders: the job waiting for the runner, and the runner
			// waiting for the job.
			for _, jobFirst := range []bool{true, false} {
				e := newEnv(t, sim.Options{})
				spec := sim.JobSpec{Repo: tc.jobRepo, Labels: tc.jobLabels, Duration: time.Minute}
				var job domain.GitHubJob
				if jobFirst {
					job = e.gh.QueueJob(spec)
				}
				reg, err := e.gh.RegisterRunner(t.Context(), tc.scope, "r", tc.runnerLabels)
				if err != nil {
					t.Fatal(err)
				}
				log, _ := e.run(reg)
				if !jobFirst {
					job = e.gh.QueueJob(spec)
				}
				started, _ := log.snapshot()
				if took := slices.Equal(started, []int64{job.ID}); took != tc.takes || len(started) > 1 {
					t.Errorf("job first %t: runner started %v, want job %d taken: %t", jobFirst, started, job.ID, tc.takes)
				}
			}
		})
	}
}

func TestOldestMatchingJobFirst(t *testing.T) {
	e := newEnv(t, sim.Options{})
	other := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"gpu"}})
	older := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
	e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
	log, _ := e.run(e.register("r1", "linux"))
	if started, _ := log.snapshot(); !slices.Equal(started, []int64{older.ID}) {
		t.Errorf("started %v, want the oldest matching job %d", started, older.ID)
	}
	if e.job(other.ID).Status != sim.StatusQueued {
		t.Errorf("job %d with a label the runner lacks left the queue", other.ID)
	}
}

func TestWaitingRunnersTakeJobsInTheOrderTheyCameOnline(t *testing.T) {
	e := newEnv(t, sim.Options{})
	first, _ := e.run(e.register("first", "linux"))
	second, _ := e.run(e.register("second", "linux"))
	for _, name := range []string{"first", "second"} {
		r, _ := e.listed(runnerID(t, e, name))
		if !r.Online || r.Busy {
			t.Errorf("waiting runner %s: online %t busy %t", name, r.Online, r.Busy)
		}
	}
	a := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Minute})
	b := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Minute})
	s1, _ := first.snapshot()
	s2, _ := second.snapshot()
	if !slices.Equal(s1, []int64{a.ID}) || !slices.Equal(s2, []int64{b.ID}) {
		t.Errorf("first took %v, second %v; want %d and %d", s1, s2, a.ID, b.ID)
	}
	if e.job(b.ID).RunnerName != "second" {
		t.Errorf("job %d runner %q", b.ID, e.job(b.ID).RunnerName)
	}
}

func runnerID(t *testing.T, e *env, name string) int64 {
	t.Helper()
	rs, err := e.gh.ListRunners(t.Context(), org)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Name == name {
			return r.ID
		}
	}
	t.Fatalf("no runner %q", name)
	return 0
}

func TestJITConfigWorksOnce(t *testing.T) {
	e := newEnv(t, sim.Options{})
	reg := e.register("r1", "linux")
	other := e.register("r2", "linux")
	if reg.JITConfig == other.JITConfig || reg.JITConfig == itoa(reg.RunnerID) {
		t.Fatalf("JIT configs are not distinct and opaque")
	}
	e.run(reg)
	err := e.gh.RunJIT(t.Context(), reg.JITConfig, nil, nil)
	if !errors.Is(err, sim.ErrJITConfigUsed) {
		t.Errorf("second RunJIT: %v, want ErrJITConfigUsed", err)
	}
	if err := e.gh.RunJIT(t.Context(), "bm90IGEgY29uZmln", nil, nil); !errors.Is(err, sim.ErrInvalidJITConfig) {
		t.Errorf("RunJIT with an unknown config: %v, want ErrInvalidJITConfig", err)
	}
	if err := e.gh.DeleteRunner(t.Context(), org, other.RunnerID); err != nil {
		t.Fatal(err)
	}
	if err := e.gh.RunJIT(t.Context(), other.JITConfig, nil, nil); !errors.Is(err, sim.ErrInvalidJITConfig) {
		t.Errorf("RunJIT of a deleted runner: %v, want ErrInvalidJITConfig", err)
	}
}

func TestBusyRunnerFinishesAndLeaves(t *testing.T) {
	e := newEnv(t, sim.Options{})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: 5 * time.Minute, Conclusion: sim.ConclusionFailure})
	reg := e.register("r1", "linux")
	log, _ := e.run(reg)
	e.advance(5*time.Minute - time.Second)
	if err := e.gh.DeleteRunner(t.Context(), org, reg.RunnerID); !errors.Is(err, domain.ErrRunnerBusy) {
		t.Errorf("DeleteRunner mid-job: %v, want ErrRunnerBusy", err)
	}
	if _, done := log.snapshot(); len(done) != 0 {
		t.Errorf("done before its duration: %v", done)
	}
	e.advance(time.Second)
	if _, done := log.snapshot(); !slices.Equal(done, []string{itoa(job.ID) + ":failure"}) {
		t.Errorf("onDone calls %v", done)
	}
	j := e.job(job.ID)
	if j.Status != sim.StatusCompleted || j.Conclusion != sim.ConclusionFailure || !j.CompletedAt.Equal(epoch.Add(5*time.Minute)) {
		t.Errorf("job %+v", j)
	}
	if _, ok := e.listed(reg.RunnerID); ok {
		t.Errorf("an ephemeral runner is still listed after its job")
	}
	if err := e.gh.DeleteRunner(t.Context(), org, reg.RunnerID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("DeleteRunner after it left: %v, want ErrNotFound", err)
	}
}

func TestDeletingAWaitingRunnerEndsItsProcess(t *testing.T) {
	e := newEnv(t, sim.Options{})
	reg := e.register("r1", "linux")
	log, _ := e.run(reg)
	if err := e.gh.DeleteRunner(t.Context(), org, reg.RunnerID); err != nil {
		t.Fatal(err)
	}
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
	started, done := log.snapshot()
	if len(started) != 0 || !slices.Equal(done, []string{"0:"}) {
		t.Errorf("deleted runner: started %v, done %v; want no job and one onDone(0, \"\")", started, done)
	}
	if e.job(job.ID).Status != sim.StatusQueued {
		t.Errorf("a deleted runner took job %d", job.ID)
	}
}

func TestCancelRunEndsQueuedAndRunningJobs(t *testing.T) {
	e := newEnv(t, sim.Options{})
	running := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Hour})
	waiting := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"gpu"}, RunID: running.RunID})
	log, _ := e.run(e.register("r1", "linux"))
	if err := e.gh.CancelRun(t.Context(), "acme/app", running.RunID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{running.ID, waiting.ID} {
		if j := e.job(id); j.Status != sim.StatusCompleted || j.Conclusion != sim.ConclusionCancelled {
			t.Errorf("job %d is %s/%s", id, j.Status, j.Conclusion)
		}
		if got := e.rec.actions(id); got[len(got)-1] != "completed" {
			t.Errorf("job %d webhooks %v", id, got)
		}
	}
	if _, done := log.snapshot(); !slices.Equal(done, []string{itoa(running.ID) + ":cancelled"}) {
		t.Errorf("onDone calls %v", done)
	}
	e.advance(2 * time.Hour)
	if got := e.rec.actions(running.ID); !slices.Equal(got, []string{"queued", "in_progress", "completed"}) {
		t.Errorf("the cancelled job's timer still fired: webhooks %v", got)
	}
}

func TestDeadRunnerGoesOfflineAfterADelayAndItsJobFails(t *testing.T) {
	e := newEnv(t, sim.Options{OfflineAfter: 2 * time.Minute})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Hour})
	reg := e.register("r1", "linux")
	log, _ := e.run(reg)
	e.advance(time.Minute)
	if !e.gh.Kill(reg.RunnerID) {
		t.Fatal("Kill found no live process")
	}
	if r, _ := e.listed(reg.RunnerID); !r.Online || !r.Busy {
		t.Errorf("before GitHub notices, the runner is listed %+v, want online and busy", r)
	}
	e.advance(2 * time.Minute)
	r, ok := e.listed(reg.RunnerID)
	if !ok || r.Online || r.Busy {
		t.Errorf("after GitHub noticed, the runner is listed %+v (listed %t), want offline and idle", r, ok)
	}
	if j := e.job(job.ID); j.Status != sim.StatusCompleted || j.Conclusion != sim.ConclusionFailure {
		t.Errorf("the dead runner's job is %s/%s, want completed/failure", j.Status, j.Conclusion)
	}
	if _, done := log.snapshot(); len(done) != 0 {
		t.Errorf("a dead process was called back: %v", done)
	}
	if err := e.gh.DeleteRunner(t.Context(), org, reg.RunnerID); err != nil {
		t.Errorf("deleting the dead runner: %v", err)
	}
}

func TestRunJITContextIsTheProcessLifetime(t *testing.T) {
	e := newEnv(t, sim.Options{})
	completed := make(chan int64, 10)
	e.rec.onCompleted = func(id int64) { completed <- id }
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Hour})
	reg := e.register("r1", "linux")
	_, stop := e.run(reg)
	stop()
	select {
	case id := <-completed:
		if id != job.ID {
			t.Fatalf("job %d completed, want %d", id, job.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of the runner's context was never noticed")
	}
	if r, _ := e.listed(reg.RunnerID); r.Online || r.Busy {
		t.Errorf("runner after its process ended: %+v", r)
	}
	if j := e.job(job.ID); j.Conclusion != sim.ConclusionFailure {
		t.Errorf("job conclusion %q, want failure", j.Conclusion)
	}
	next := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
	if e.job(next.ID).Status != sim.StatusQueued {
		t.Errorf("a dead runner took job %d", next.ID)
	}
	if e.gh.Kill(reg.RunnerID) {
		t.Errorf("Kill of a dead process reported a kill")
	}
}
