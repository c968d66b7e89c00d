// Package githubtest is the contract every domain.GitHub implementation must
// pass, so that the simulated GitHub and the REST client cannot drift apart.
// An implementation's test calls Run with a constructor of harnesses:
//
//	func TestContract(t *testing.T) {
//		githubtest.Run(t, func(t *testing.T) githubtest.Harness { return newHarness(t) })
//	}
//
// The harness gives the GitHub under test and the means to create what the
// port cannot: queued jobs (a workflow asking for a runner) and a runner
// process running a job. Each case gets a fresh harness and uses only the
// harness's Owner and owners derived from it, so implementations backed by
// one fake server may share it between cases.
//
// Where GitHub is free to add to what it was given (default runner labels
// such as "self-hosted"), the suite checks for inclusion, not equality; list
// results are compared without regard to order.
package githubtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// JobSpec is a job for Harness.QueueJob to queue.
type JobSpec struct {
	Repo   string // owner/name
	Name   string
	Labels []string
	RunID  int64 // adds the job to this run; 0 starts a new run
}

// Harness is one case's GitHub under test with its set-up helpers. The
// helpers fail the case themselves (they hold its *testing.T).
type Harness struct {
	GitHub domain.GitHub
	// Owner is an organisation the case may use; its repositories exist
	// as soon as a job names them.
	Owner string
	// Enterprise is an enterprise Owner belongs to, for the case of
	// enterprise runners; empty skips that case.
	Enterprise string
	// QueueJob makes a queued job, as a workflow run asking for a runner
	// does, and returns it.
	QueueJob func(spec JobSpec) domain.GitHubJob
	// StartRunner runs the runner process of reg until the case ends and
	// returns once the runner is running a job, with the job's id. The
	// suite calls it only when exactly one queued job matches the runner.
	// The job must not finish on its own while the case runs.
	StartRunner func(reg domain.RunnerRegistration) (jobID int64)
}

// Run runs the contract against harnesses made by newHarness, one per case.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		run  func(*fixture)
	}{
		{"RegisterRunnerIsListedOffline", testRegisterRunnerIsListedOffline},
		{"RegisterRunnerNameTaken", testRegisterRunnerNameTaken},
		{"RepoScopeRunnersListedInRepoOnly", testRepoScopeRunners},
		{"DeleteRunner", testDeleteRunner},
		{"DeleteBusyRunner", testDeleteBusyRunner},
		{"EnterpriseRunnersServeItsOrganisations", testEnterpriseRunners},
		{"QueuedJobsListsOnlyQueued", testQueuedJobsListsOnlyQueued},
		{"GetJob", testGetJob},
		{"CancelRunCancelsQueuedJobs", testCancelRun},
		{"RerunJobOnceItsRunCompleted", testRerunJob},
		{"LabelsRoundTrip", testLabelsRoundTrip},
		{"EndedContextIsAnError", testEndedContext},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.run(&fixture{t: t, ctx: t.Context(), Harness: h, org: domain.Scope{Owner: h.Owner}})
		})
	}
}

// fixture is one case's harness with helpers that fail the case on error.
type fixture struct {
	Harness
	t   *testing.T
	ctx context.Context
	org domain.Scope
	seq int
}

// repo names a repository of the case's owner.
func (f *fixture) repo(name string) string { return f.Owner + "/" + name }

// unique returns a name no earlier call of this case returned.
func (f *fixture) unique(prefix string) string {
	f.seq++
	return fmt.Sprintf("%s-%d", prefix, f.seq)
}

func (f *fixture) register(s domain.Scope, labels ...string) domain.RunnerRegistration {
	f.t.Helper()
	reg, err := f.GitHub.RegisterRunner(f.ctx, s, f.unique("runner"), labels)
	if err != nil {
		f.t.Fatalf("RegisterRunner(%s): %v", s, err)
	}
	if reg.RunnerID == 0 || reg.JITConfig == "" || reg.Name == "" {
		f.t.Fatalf("RegisterRunner returned an incomplete registration: id %d, name %q, JIT config empty: %t",
			reg.RunnerID, reg.Name, reg.JITConfig == "")
	}
	return reg
}

func (f *fixture) runners(s domain.Scope) []domain.GitHubRunner {
	f.t.Helper()
	rs, err := f.GitHub.ListRunners(f.ctx, s)
	if err != nil {
		f.t.Fatalf("ListRunners(%s): %v", s, err)
	}
	return rs
}

// runner returns the listed runner with id, or fails.
func (f *fixture) runner(s domain.Scope, id int64) domain.GitHubRunner {
	f.t.Helper()
	for _, r := range f.runners(s) {
		if r.ID == id {
			return r
		}
	}
	f.t.Fatalf("runner %d is not listed in %s", id, s)
	return domain.GitHubRunner{}
}

func (f *fixture) listed(s domain.Scope, id int64) bool {
	f.t.Helper()
	return slices.ContainsFunc(f.runners(s), func(r domain.GitHubRunner) bool { return r.ID == id })
}

func (f *fixture) queue(repo string, labels ...string) domain.GitHubJob {
	f.t.Helper()
	return f.QueueJob(JobSpec{Repo: repo, Name: f.unique("job"), Labels: labels})
}

func (f *fixture) queued(s domain.Scope) []int64 {
	f.t.Helper()
	jobs, err := f.GitHub.QueuedJobs(f.ctx, s)
	if err != nil {
		f.t.Fatalf("QueuedJobs(%s): %v", s, err)
	}
	ids := make([]int64, 0, len(jobs))
	for _, j := range jobs {
		if j.Status != "queued" {
			f.t.Errorf("QueuedJobs(%s) lists job %d with status %q", s, j.ID, j.Status)
		}
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// wantQueued fails unless QueuedJobs(s) lists exactly the jobs ids.
func (f *fixture) wantQueued(s domain.Scope, ids ...int64) {
	f.t.Helper()
	if got, want := f.queued(s), sorted(ids...); !slices.Equal(got, want) {
		f.t.Errorf("QueuedJobs(%s) = %v, want %v", s, got, want)
	}
}

// start runs reg's runner and fails unless it takes job.
func (f *fixture) start(reg domain.RunnerRegistration, job domain.GitHubJob) {
	f.t.Helper()
	if got := f.StartRunner(reg); got != job.ID {
		f.t.Fatalf("runner %q took job %d, want %d of %s", reg.Name, got, job.ID, job.Repo)
	}
}

func (f *fixture) cancelRun(repo string, runID int64) {
	f.t.Helper()
	if err := f.GitHub.CancelRun(f.ctx, repo, runID); err != nil {
		f.t.Fatalf("CancelRun(%s, %d): %v", repo, runID, err)
	}
}

func (f *fixture) job(repo string, id int64) domain.GitHubJob {
	f.t.Helper()
	j, err := f.GitHub.GetJob(f.ctx, repo, id)
	if err != nil {
		f.t.Fatalf("GetJob(%s, %d): %v", repo, id, err)
	}
	return j
}

// wantErr fails unless err wraps target.
func (f *fixture) wantErr(what string, err, target error) {
	f.t.Helper()
	if !errors.Is(err, target) {
		f.t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// sorted returns the ids in ascending order.
func sorted(ids ...int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
