// Package fakegh is a fake of the GitHub REST API on an httptest server, for
// testing the REST client and everything built on it without an account.
//
// It serves exactly the endpoints bullpen uses, with bodies shaped like
// GitHub's (the field names, nesting and types of the OpenAPI description's
// schemas and examples; see shapes_test.go):
//
//	POST   /repos/{owner}/{repo}/actions/runners/generate-jitconfig
//	POST   /orgs/{org}/actions/runners/generate-jitconfig
//	GET    /repos/{owner}/{repo}/actions/runners
//	GET    /orgs/{org}/actions/runners
//	DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}
//	DELETE /orgs/{org}/actions/runners/{runner_id}
//	GET    /repos/{owner}/{repo}/actions/runs            (?status=)
//	GET    /repos/{owner}/{repo}/actions/runs/{run_id}/jobs
//	GET    /repos/{owner}/{repo}/actions/jobs/{job_id}
//	POST   /repos/{owner}/{repo}/actions/runs/{run_id}/cancel
//	GET    /orgs/{org}/repos
//	POST   /app/installations/{installation_id}/access_tokens
//	GET    /app, /orgs/{org}/installation, /users/{username}/installation,
//	       /repos/{owner}/{repo}/installation    (the App's JWT)
//	GET    /repos/{owner}/{repo}/contents/{path} (raw, with an ETag)
//	GET    /user
//	POST   /enterprises/{enterprise}/actions/runners/generate-jitconfig
//	GET    /enterprises/{enterprise}/actions/runners
//	DELETE /enterprises/{enterprise}/actions/runners/{runner_id}
//	GET    /enterprises/{enterprise}/actions/runner-groups  (a token, never an installation's)
//
// Lists paginate with page and per_page (default 30, at most 100, and at
// most PageSize) and Link headers. Errors come as GitHub sends them: 404 for
// anything unknown, 409 for a taken runner name or a completed run's cancel,
// 422 for deleting a busy runner or an invalid body, 401 for bad
// credentials, 403 with x-ratelimit-remaining: 0 under RateLimit, and
// whatever FailNext injects.
//
// The state is seeded and driven through methods: AddRepo, QueueJob,
// StartJob, CompleteJob, AddRunner, SetBusy, SetOnline, RunJIT, and for a
// GitHub App RequireApp, AddInstallation, SuspendInstallation; for
// enterprise runners AddEnterprise, AddEnterpriseRunnerGroup; PutFile
// writes a repository's file. Accounts
// named by AddRepo or QueueJob are organisations. With AutoCreate, every
// owner and repository a request names exists too.
package fakegh

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Defaults of the records the fake makes.
const (
	DefaultWorkflow        = "CI"
	DefaultJobName         = "build"
	DefaultHeadBranch      = "main"
	DefaultRunnerGroupID   = 1
	DefaultRunnerGroupName = "Default"
	runnerVersion          = "2.328.0"
)

// Server is the fake GitHub. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu         sync.Mutex
	clk        domain.Clock
	autoCreate bool
	accounts   map[string]*account // by lower-case login
	repos      map[string]*repo    // by lower-case full name
	runs       map[int64]*run
	jobs       map[int64]*job
	runners    map[int64]*runner
	lastID     int64
	lastJob    int64
	lastRun    int64
	faults     faults
	auth       auth
	requests   []string
	counts     map[string]int // requests by route, with and without method
	labelIDs   map[string]int64
	files      map[string]string // by lower-case repository full name + "/" + path
	hook       *sender           // where job events are delivered, once SendDeliveries names it
	// othersFirst makes a starting runner take a job other than the one it
	// was registered for, when it may (TakeOthersJobsFirst).
	othersFirst bool
	// registeredBy is the installation that registered each runner, by
	// lower-case name.
	registeredBy map[string]int64
	enterprises  map[string]string // slug by lower-case slug
	// registeredGroups is each JIT runner's group id, by lower-case name.
	registeredGroups map[string]int64
	groups           map[string][]runnerGroup // organisations' runner groups besides Default, by lower-case login
	workFolders      map[string]string        // the work_folder each runner was registered with, by lower-case name
}

type account struct {
	id    int64
	login string
	// enterprise is the lower-case slug of the enterprise the account
	// belongs to, if any.
	enterprise string
}

type repo struct {
	id       int64
	owner    *account
	name     string
	archived bool
	created  time.Time
}

func (r *repo) fullName() string { return r.owner.login + "/" + r.name }

type run struct {
	id       int64
	number   int
	repo     *repo
	workflow string
	headSHA  string
	created  time.Time
	jobs     []*job
}

type job struct {
	id         int64
	attempt    int // the run attempt it belongs to; a re-run makes a new job of the next
	run        *run
	name       string
	labels     []string
	status     string
	conclusion string
	runner     *runner // registered runner running it, if any
	runnerName string
	created    time.Time
	started    time.Time
	completed  time.Time
}

type runner struct {
	id    int64
	owner string // the scope: an organisation, or with repo set a repository
	repo  string
	// enterprise, when set, is the scope instead: the runner is the
	// enterprise's (owner and repo empty).
	enterprise string
	group      int64 // its runner group's id; the Default group when zero
	name       string
	labels     []string
	online     bool
	busy       bool
	ephemeral  bool
	jit        string
	job        *job
	started    bool // a process ran its JIT config
	// installation is the installation whose token registered the runner.
	installation int64
}

// RunnerSpec is a runner for AddRunner to register.
type RunnerSpec struct {
	Scope     domain.Scope
	Name      string
	Labels    []string // custom labels; "self-hosted" is always added
	Online    bool
	Busy      bool
	Ephemeral bool
}

// New starts a fake GitHub on 127.0.0.1 with no state, no required
// credentials and the wall clock. Close it when done.
func New() *Server {
	s := &Server{
		clk:      clock.Real{},
		accounts: map[string]*account{},
		repos:    map[string]*repo{},
		runs:     map[int64]*run{},
		jobs:     map[int64]*job{},
		runners:  map[int64]*runner{},
		lastID:   1_000,
		lastJob:  30_000_000_000,
		lastRun:  10_000_000_000,
		faults:   newFaults(),
		auth:     newAuth(),
	}
	s.srv = httptest.NewServer(s.handler())
	return s
}

// URL is the API's base URL, without a trailing slash.
func (s *Server) URL() string { return s.srv.URL }

// Close shuts the server down, and stops its deliveries.
func (s *Server) Close() {
	s.mu.Lock()
	if s.hook != nil && !s.hook.closed {
		close(s.hook.done)
		s.hook.closed = true
	}
	s.mu.Unlock()
	s.srv.Close()
}

// SetClock makes the fake read time from clk: record times, token expiry
// and the end of a rate limit.
func (s *Server) SetClock(clk domain.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clk = clk
}

// TakeOthersJobsFirst makes a starting runner process whose name says
// which job it was registered for (domain.RunnerName) take another queued
// job its labels cover when there is one: GitHub promises no such match,
// and with two queued jobs of the same labels this makes their runners
// swap jobs for sure.
func (s *Server) TakeOthersJobsFirst() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.othersFirst = true
}

// AutoCreate makes every owner and repository a request names exist, as
// an organisation and a repository of it.
func (s *Server) AutoCreate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.autoCreate = true
}

// AddOrg makes an organisation exist.
func (s *Server) AddOrg(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account(login)
}

// AddRepo makes a repository ("owner/name") and its organisation exist.
func (s *Server) AddRepo(fullName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repo(fullName)
}

// ArchiveRepo marks a repository archived (GitHub runs no workflows there).
func (s *Server) ArchiveRepo(fullName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(fullName)]
	if r == nil {
		return fmt.Errorf("fakegh: no repository %s", fullName)
	}
	r.archived = true
	return nil
}

// account returns the account, creating it. Called under s.mu.
func (s *Server) account(login string) *account {
	a := s.accounts[strings.ToLower(login)]
	if a == nil {
		s.lastID++
		a = &account{id: s.lastID, login: login}
		s.accounts[strings.ToLower(login)] = a
	}
	return a
}

// repo returns the repository, creating it and its owner. Called under s.mu.
func (s *Server) repo(fullName string) *repo {
	owner, name, ok := strings.Cut(fullName, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		panic(fmt.Sprintf("fakegh: %q is not owner/name", fullName))
	}
	r := s.repos[strings.ToLower(fullName)]
	if r == nil {
		s.lastID++
		r = &repo{id: s.lastID, owner: s.account(owner), name: name, created: s.clk.Now()}
		s.repos[strings.ToLower(fullName)] = r
	}
	return r
}

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

// Workflow names the job's workflow (DefaultWorkflow otherwise).
func Workflow(name string) JobOption { return func(j *jobSpec) { j.workflow = name } }

// QueueJob queues a job asking for a runner with these labels in repo
// ("owner/name", created if new), in a new run unless InRun says otherwise,
// and returns it. A runner process started by RunJIT and waiting for work
// takes it at once if its labels cover the job's. A malformed repository
// name or an InRun of another repository's run is a bug in the test: it
// panics.
func (s *Server) QueueJob(repoName string, labels []string, opts ...JobOption) domain.GitHubJob {
	spec := jobSpec{name: DefaultJobName, workflow: DefaultWorkflow, status: "queued"}
	for _, o := range opts {
		o(&spec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repoName)
	ru := s.runFor(r, spec)
	s.lastJob++
	j := &job{id: s.lastJob, run: ru, name: spec.name, labels: append([]string{}, labels...), status: spec.status,
		attempt: 1, created: s.clk.Now()}
	ru.jobs = append(ru.jobs, j)
	s.jobs[j.id] = j
	s.announce(j, spec.status)
	if j.status == "queued" {
		if rn := s.waitingRunnerFor(j); rn != nil {
			s.start(j, rn.name, rn)
		}
	}
	return j.public()
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

// byID is a map of records keyed by their ids, in the order of the ids.
func byID[T any](records map[int64]T) []T {
	out := make([]T, 0, len(records))
	for _, id := range slices.Sorted(maps.Keys(records)) {
		out = append(out, records[id])
	}
	return out
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
