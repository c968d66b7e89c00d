package githubtest

import (
	"context"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testRegisterRunnerIsListedOffline(f *fixture) {
	a := f.register(f.org, "linux", "x64")
	b := f.register(f.org, "linux", "x64")
	if a.RunnerID == b.RunnerID || a.Name == b.Name || a.JITConfig == b.JITConfig {
		f.t.Fatalf("two registrations share an id, name or JIT config: ids %d and %d, names %q and %q",
			a.RunnerID, b.RunnerID, a.Name, b.Name)
	}
	for _, reg := range []domain.RunnerRegistration{a, b} {
		r := f.runner(f.org, reg.RunnerID)
		if r.Name != reg.Name {
			f.t.Errorf("runner %d listed as %q, registered as %q", reg.RunnerID, r.Name, reg.Name)
		}
		if r.Online || r.Busy {
			f.t.Errorf("runner %d no process has run: listed online=%t busy=%t, want offline and idle", r.ID, r.Online, r.Busy)
		}
	}
}

func testRegisterRunnerNameTaken(f *fixture) {
	reg := f.register(f.org, "linux")
	_, err := f.GitHub.RegisterRunner(f.ctx, f.org, reg.Name, []string{"linux"})
	f.wantErr("RegisterRunner with a name already registered", err, domain.ErrExists)
	if n := len(f.runners(f.org)); n != 1 {
		f.t.Errorf("after a refused registration %d runners are listed, want 1", n)
	}
}

func testRepoScopeRunners(f *fixture) {
	repoScope := domain.Scope{Owner: f.Owner, Repo: "service"}
	inRepo := f.register(repoScope, "linux")
	inOrg := f.register(f.org, "linux")
	if !f.listed(repoScope, inRepo.RunnerID) || f.listed(repoScope, inOrg.RunnerID) {
		f.t.Errorf("repository %s lists %v, want its own runner %d only", repoScope, f.runners(repoScope), inRepo.RunnerID)
	}
	if !f.listed(f.org, inOrg.RunnerID) || f.listed(f.org, inRepo.RunnerID) {
		f.t.Errorf("organisation %s lists %v, want its own runner %d only", f.org, f.runners(f.org), inOrg.RunnerID)
	}
}

func testDeleteRunner(f *fixture) {
	keep := f.register(f.org, "linux")
	gone := f.register(f.org, "linux")
	if err := f.GitHub.DeleteRunner(f.ctx, f.org, gone.RunnerID); err != nil {
		f.t.Fatalf("DeleteRunner: %v", err)
	}
	if f.listed(f.org, gone.RunnerID) || !f.listed(f.org, keep.RunnerID) {
		f.t.Errorf("after deleting runner %d the list is %v", gone.RunnerID, f.runners(f.org))
	}
	f.wantErr("DeleteRunner of a deleted runner", f.GitHub.DeleteRunner(f.ctx, f.org, gone.RunnerID), domain.ErrNotFound)
	f.wantErr("DeleteRunner of an unknown id", f.GitHub.DeleteRunner(f.ctx, f.org, 987654321), domain.ErrNotFound)
	other := domain.Scope{Owner: f.Owner, Repo: "elsewhere"}
	f.wantErr("DeleteRunner in a scope the runner is not in", f.GitHub.DeleteRunner(f.ctx, other, keep.RunnerID), domain.ErrNotFound)
	if !f.listed(f.org, keep.RunnerID) {
		f.t.Errorf("a refused delete removed runner %d", keep.RunnerID)
	}
}

func testEnterpriseRunners(f *fixture) {
	if f.Enterprise == "" {
		f.t.Skip("the harness names no enterprise")
	}
	ent := domain.Scope{Enterprise: f.Enterprise}
	job := f.queue(f.repo("app"), "enterprise-case")
	// A scope that also names where its jobs are registers at the enterprise.
	reg := f.register(domain.Scope{Enterprise: f.Enterprise, Owner: f.Owner, Repo: "app"}, "enterprise-case")
	if !f.listed(ent, reg.RunnerID) || f.listed(f.org, reg.RunnerID) {
		f.t.Errorf("enterprise runner %d: listed in %s %t, in organisation %s %t; want the enterprise only",
			reg.RunnerID, ent, f.listed(ent, reg.RunnerID), f.org, f.listed(f.org, reg.RunnerID))
	}
	_, err := f.GitHub.RegisterRunner(f.ctx, ent, reg.Name, []string{"enterprise-case"})
	f.wantErr("RegisterRunner with a name the enterprise has", err, domain.ErrExists)
	f.wantErr("DeleteRunner of an enterprise runner in its organisation", f.GitHub.DeleteRunner(f.ctx, f.org, reg.RunnerID), domain.ErrNotFound)
	_, err = f.GitHub.QueuedJobs(f.ctx, ent)
	f.wantErr("QueuedJobs of a whole enterprise", err, domain.ErrInvalidRequest)
	f.start(reg, job)
	f.wantErr("DeleteRunner of a busy enterprise runner", f.GitHub.DeleteRunner(f.ctx, ent, reg.RunnerID), domain.ErrRunnerBusy)
	_, err = f.GitHub.ListRunners(f.ctx, domain.Scope{Enterprise: "no-such-enterprise"})
	f.wantErr("ListRunners of an unknown enterprise", err, domain.ErrNotFound)
}

func testDeleteBusyRunner(f *fixture) {
	job := f.queue(f.repo("app"), "busy-case")
	reg := f.register(f.org, "busy-case")
	f.start(reg, job)
	r := f.runner(f.org, reg.RunnerID)
	if !r.Online || !r.Busy {
		f.t.Errorf("a runner running a job is listed online=%t busy=%t, want both", r.Online, r.Busy)
	}
	f.wantErr("DeleteRunner of a busy runner", f.GitHub.DeleteRunner(f.ctx, f.org, reg.RunnerID), domain.ErrRunnerBusy)
	if !f.listed(f.org, reg.RunnerID) {
		f.t.Errorf("a refused delete removed busy runner %d", reg.RunnerID)
	}
	if j := f.job(job.Repo, job.ID); j.Status != "in_progress" || j.RunnerName != reg.Name {
		f.t.Errorf("job %d is %q on runner %q, want in_progress on %q", j.ID, j.Status, j.RunnerName, reg.Name)
	}
}

func testQueuedJobsListsOnlyQueued(f *fixture) {
	app, web := f.repo("app"), f.repo("web")
	taken := f.queue(app, "take-me")
	waiting := f.queue(app, "linux")
	onWeb := f.queue(web, "linux")
	cancelled := f.queue(web, "linux")
	elsewhere := f.queue(f.Owner+"-other/app", "linux")

	f.cancelRun(cancelled.Repo, cancelled.RunID)
	f.start(f.register(f.org, "take-me"), taken)

	f.wantQueued(f.org, waiting.ID, onWeb.ID)
	f.wantQueued(domain.Scope{Owner: f.Owner, Repo: "app"}, waiting.ID)
	f.wantQueued(domain.Scope{Owner: f.Owner + "-other"}, elsewhere.ID)
}

func testGetJob(f *fixture) {
	spec := JobSpec{Repo: f.repo("app"), Name: "unit tests", Labels: []string{"linux", "x64"}}
	queued := f.QueueJob(spec)
	if queued.ID == 0 || queued.RunID == 0 {
		f.t.Fatalf("QueueJob returned id %d, run id %d", queued.ID, queued.RunID)
	}
	j := f.job(spec.Repo, queued.ID)
	switch {
	case j.ID != queued.ID, j.RunID != queued.RunID, !strings.EqualFold(j.Repo, spec.Repo):
		f.t.Errorf("GetJob = job %d of run %d in %s, want job %d of run %d in %s", j.ID, j.RunID, j.Repo, queued.ID, queued.RunID, spec.Repo)
	case j.Name != spec.Name, j.Status != "queued", j.Conclusion != "", j.RunnerName != "":
		f.t.Errorf("GetJob = name %q status %q conclusion %q runner %q, want %q queued without conclusion or runner",
			j.Name, j.Status, j.Conclusion, j.RunnerName, spec.Name)
	case j.RunAttempt < 1, j.CreatedAt.IsZero():
		f.t.Errorf("GetJob = run attempt %d, created at %v", j.RunAttempt, j.CreatedAt)
	}
	second := f.queue(spec.Repo, "linux")
	if second.ID == queued.ID || second.RunID == queued.RunID {
		f.t.Errorf("two jobs queued as new runs share an id or run id: %d/%d and %d/%d", queued.ID, queued.RunID, second.ID, second.RunID)
	}
	_, err := f.GitHub.GetJob(f.ctx, spec.Repo, 987654321)
	f.wantErr("GetJob of an unknown id", err, domain.ErrNotFound)
	_, err = f.GitHub.GetJob(f.ctx, f.repo("web"), queued.ID)
	f.wantErr("GetJob in a repository the job is not in", err, domain.ErrNotFound)
}

func testCancelRun(f *fixture) {
	repo := f.repo("app")
	first := f.queue(repo, "linux")
	second := f.QueueJob(JobSpec{Repo: repo, Name: f.unique("job"), Labels: []string{"linux"}, RunID: first.RunID})
	other := f.queue(repo, "linux")
	if second.RunID != first.RunID {
		f.t.Fatalf("a job queued into run %d landed in run %d", first.RunID, second.RunID)
	}
	f.cancelRun(repo, first.RunID)
	for _, id := range []int64{first.ID, second.ID} {
		if j := f.job(repo, id); j.Status != "completed" || j.Conclusion != "cancelled" {
			f.t.Errorf("job %d of the cancelled run is %q/%q, want completed/cancelled", id, j.Status, j.Conclusion)
		}
	}
	if j := f.job(repo, other.ID); j.Status != "queued" {
		f.t.Errorf("job %d of another run is %q after the cancel, want queued", other.ID, j.Status)
	}
	f.wantQueued(f.org, other.ID)
	if err := f.GitHub.CancelRun(f.ctx, repo, first.RunID); err != nil {
		f.t.Errorf("cancelling a cancelled run again: %v, want no error", err)
	}
	f.wantErr("CancelRun of an unknown run", f.GitHub.CancelRun(f.ctx, repo, 987654321), domain.ErrNotFound)
}

// A job is re-run only once its run completed: as a new queued job of the
// same run with the same labels.
func testRerunJob(f *fixture) {
	repo := f.repo("app")
	first := f.queue(repo, "linux", "spot")
	f.wantErr("RerunJob while its run is in progress", f.GitHub.RerunJob(f.ctx, repo, first.ID), domain.ErrRunInProgress)
	f.cancelRun(repo, first.RunID)
	if err := f.GitHub.RerunJob(f.ctx, repo, first.ID); err != nil {
		f.t.Fatalf("RerunJob of a completed run: %v", err)
	}
	queued, err := f.GitHub.QueuedJobs(f.ctx, domain.Scope{Owner: f.Owner, Repo: "app"})
	if err != nil {
		f.t.Fatal(err)
	}
	var again []domain.GitHubJob
	for _, j := range queued {
		if j.RunID == first.RunID {
			again = append(again, j)
		}
	}
	if len(again) != 1 || again[0].ID == first.ID || !slices.Equal(again[0].Labels, first.Labels) {
		f.t.Fatalf("after the re-run the run's queued jobs are %+v, want one new job with labels %v", again, first.Labels)
	}
	f.wantErr("RerunJob of an unknown job", f.GitHub.RerunJob(f.ctx, repo, 987654321), domain.ErrNotFound)
}

func testLabelsRoundTrip(f *fixture) {
	runnerLabels := []string{"runs-on=4242/pool=small", "env=production", "GPU", "region=eu-west-1"}
	reg := f.register(f.org, runnerLabels...)
	listed := f.runner(f.org, reg.RunnerID).Labels
	for _, l := range runnerLabels {
		if !slices.Contains(listed, l) {
			f.t.Errorf("runner labels %q lost %q", listed, l)
		}
	}
	jobLabels := []string{"runs-on=4242/pool=small", "env=production", "cpu=4+8", "GPU"}
	queued := f.queue(f.repo("app"), jobLabels...)
	if got := f.job(queued.Repo, queued.ID).Labels; !slices.Equal(got, jobLabels) {
		f.t.Errorf("GetJob labels = %q, want %q", got, jobLabels)
	}
	jobs, err := f.GitHub.QueuedJobs(f.ctx, f.org)
	if err != nil {
		f.t.Fatalf("QueuedJobs: %v", err)
	}
	if len(jobs) != 1 || !slices.Equal(jobs[0].Labels, jobLabels) {
		f.t.Errorf("QueuedJobs = %+v, want job %d labelled %q", jobs, queued.ID, jobLabels)
	}
}

func testEndedContext(f *fixture) {
	reg := f.register(f.org, "linux")
	job := f.queue(f.repo("app"), "linux")
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	gh := f.GitHub
	calls := map[string]error{}
	_, calls["RegisterRunner"] = gh.RegisterRunner(ctx, f.org, f.unique("runner"), []string{"linux"})
	_, calls["ListRunners"] = gh.ListRunners(ctx, f.org)
	calls["DeleteRunner"] = gh.DeleteRunner(ctx, f.org, reg.RunnerID)
	_, calls["QueuedJobs"] = gh.QueuedJobs(ctx, f.org)
	_, calls["GetJob"] = gh.GetJob(ctx, job.Repo, job.ID)
	calls["CancelRun"] = gh.CancelRun(ctx, job.Repo, job.RunID)
	calls["RerunJob"] = gh.RerunJob(ctx, job.Repo, job.ID)
	for op, err := range calls {
		f.wantErr(op+" with an ended context", err, context.Canceled)
	}
	if !f.listed(f.org, reg.RunnerID) || f.job(job.Repo, job.ID).Status != "queued" {
		f.t.Errorf("a call with an ended context changed something")
	}
}
