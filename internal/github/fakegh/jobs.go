package fakegh

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// JobOption adjusts a job QueueJob makes.
type JobOption func(*jobSpec)

type jobSpec struct {
	name, workflow string
	runID          int64
	status         string // queued unless Held says otherwise
}

// Held queues the job in another of GitHub's statuses before queued:
// waiting (for an environment's approval), requested or pending. Release
// queues it.
func Held(status string) JobOption { return func(j *jobSpec) { j.status = status } }

// InRun adds the job to an existing run of the same repository.
func InRun(runID int64) JobOption { return func(j *jobSpec) { j.runID = runID } }

// Named names the job (DefaultJobName otherwise).
func Named(name string) JobOption { return func(j *jobSpec) { j.name = name } }

// QueueJob queues a job asking for a runner with these labels in repo
// ("owner/name", created if new), in a new run unless InRun says otherwise,
// and returns it. A runner process started by RunJIT and waiting for work
// takes it at once if its labels cover the job's. A malformed repository
// name or an InRun of another repository's run is a bug in the test: it
// panics.
func (s *Server) QueueJob(repoName string, labels []string, opts ...JobOption) domain.GitHubJob {
	return s.QueueJobs(repoName, labels, 1, opts...)[0]
}

// QueueJobs queues n jobs of one run as QueueJob queues one, all at once:
// no runner can start between them, so a runner that starts takes
// whichever of them it prefers. Fewer than one is a bug in the test: it
// panics.
func (s *Server) QueueJobs(repoName string, labels []string, n int, opts ...JobOption) []domain.GitHubJob {
	if n < 1 {
		panic(fmt.Sprintf("fakegh: queue %d jobs", n))
	}
	spec := jobSpec{name: DefaultJobName, workflow: DefaultWorkflow, status: "queued"}
	for _, o := range opts {
		o(&spec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repoName)
	ru := s.runFor(r, spec)
	queued := make([]*job, n)
	for k := range queued {
		s.lastJob++
		j := &job{id: s.lastJob, run: ru, name: spec.name, labels: append([]string{}, labels...), status: spec.status,
			attempt: 1, created: s.clk.Now()}
		ru.jobs = append(ru.jobs, j)
		s.jobs[j.id] = j
		queued[k] = j
	}
	out := make([]domain.GitHubJob, n)
	for k, j := range queued {
		s.announce(j, spec.status)
		if j.status == "queued" {
			if rn := s.waitingRunnerFor(j); rn != nil {
				s.start(j, rn.name, rn)
			}
		}
		out[k] = j.public()
	}
	return out
}

// Release queues a job held in waiting, requested or pending, as GitHub
// does once its environment is approved or its concurrency group frees.
func (s *Server) Release(jobID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || (j.status != "waiting" && j.status != "requested" && j.status != "pending") {
		return fmt.Errorf("fakegh: job %d is not held", jobID)
	}
	j.status = "queued"
	s.announce(j, "queued")
	if rn := s.waitingRunnerFor(j); rn != nil {
		s.start(j, rn.name, rn)
	}
	return nil
}

func (s *Server) runFor(r *repo, spec jobSpec) *run {
	if spec.runID != 0 {
		ru := s.runs[spec.runID]
		if ru == nil || ru.repo != r {
			panic(fmt.Sprintf("fakegh: no run %d in %s", spec.runID, r.fullName()))
		}
		return ru
	}
	s.lastRun++
	ru := &run{
		id: s.lastRun, repo: r, workflow: spec.workflow, created: s.clk.Now(),
		headSHA: fmt.Sprintf("%040x", s.lastRun),
	}
	for _, other := range s.runs {
		if other.repo == r {
			ru.number++
		}
	}
	ru.number++
	s.runs[ru.id] = ru
	return ru
}

// StartJob puts a queued job in progress on the runner named runnerName. If
// a runner of that name is registered where it may serve the job, it goes
// online and busy with it; otherwise only the job records the name (a
// runner bullpen does not know about).
func (s *Server) StartJob(jobID int64, runnerName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || j.status != "queued" {
		return fmt.Errorf("fakegh: job %d is not queued", jobID)
	}
	var rn *runner
	for _, r := range byID(s.runners) {
		if strings.EqualFold(r.name, runnerName) && r.covers(j.run.repo) && r.job == nil {
			rn = r
			break
		}
	}
	s.start(j, runnerName, rn)
	return nil
}

// start puts j in progress on the runner named name (rn when registered).
func (s *Server) start(j *job, name string, rn *runner) {
	j.status, j.started, j.runnerName = "in_progress", s.clk.Now(), name
	if rn != nil {
		j.runner = rn
		rn.job, rn.busy, rn.online = j, true, true
	}
	s.announce(j, "in_progress")
}

// CompleteJob ends a queued or in-progress job with conclusion. Its runner
// becomes idle, or is removed if it is ephemeral, as GitHub does.
func (s *Server) CompleteJob(jobID int64, conclusion string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || j.status == "completed" {
		return fmt.Errorf("fakegh: job %d is not queued or in progress", jobID)
	}
	s.complete(j, conclusion)
	return nil
}

func (s *Server) complete(j *job, conclusion string) {
	j.status, j.conclusion, j.completed = "completed", conclusion, s.clk.Now()
	s.announce(j, "completed")
	rn := j.runner
	j.runner = nil
	if rn == nil {
		return
	}
	rn.job, rn.busy = nil, false
	if rn.ephemeral {
		delete(s.runners, rn.id)
	}
}

// Job returns a job as GitHub would report it.
func (s *Server) Job(id int64) (domain.GitHubJob, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return domain.GitHubJob{}, false
	}
	return j.public(), true
}

func (j *job) public() domain.GitHubJob {
	return domain.GitHubJob{
		ID: j.id, RunID: j.run.id, RunAttempt: j.attempt, Repo: j.run.repo.fullName(), Name: j.name,
		Workflow: j.run.workflow, Status: j.status, Conclusion: j.conclusion,
		Labels: slices.Clone(j.labels), RunnerName: j.runnerName, CreatedAt: j.created,
	}
}

// status is the run's status as GitHub derives it from its jobs.
func (ru *run) status() (status, conclusion string) {
	queued, done, waiting, running := 0, 0, 0, 0
	for _, j := range ru.jobs {
		switch j.status {
		case "queued":
			queued++
		case "completed":
			done++
		case "waiting":
			waiting++
		case "in_progress":
			running++
		}
	}
	switch {
	case done == len(ru.jobs):
		return "completed", ru.conclusion()
	case queued == len(ru.jobs):
		return "queued", ""
	case waiting > 0 && running == 0:
		return "waiting", ""
	default:
		return "in_progress", ""
	}
}

func (ru *run) conclusion() string {
	worst := "success"
	for _, j := range ru.jobs {
		switch j.conclusion {
		case "cancelled":
			return "cancelled"
		case "failure":
			worst = "failure"
		}
	}
	return worst
}

// attempt is the run's latest attempt.
func (ru *run) attempt() int {
	n := 1
	for _, j := range ru.jobs {
		n = max(n, j.attempt)
	}
	return n
}

// latestJobs are the jobs of the run's latest attempt. (GitHub also shows
// there, completed, the jobs a partial re-run did not run again; a re-run
// needs its run completed, so those are never queued.)
func (ru *run) latestJobs() []*job {
	latest := ru.attempt()
	var out []*job
	for _, j := range ru.jobs {
		if j.attempt == latest {
			out = append(out, j)
		}
	}
	return out
}
