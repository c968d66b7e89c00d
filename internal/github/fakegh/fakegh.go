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
//	GET    /repos/{owner}/{repo}/actions/runs            (?status=, ?created=; a filtered
//	       listing finds at most 1,000 runs, as GitHub's search does)
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

// byID is a map of records keyed by their ids, in the order of the ids.
func byID[T any](records map[int64]T) []T {
	out := make([]T, 0, len(records))
	for _, id := range slices.Sorted(maps.Keys(records)) {
		out = append(out, records[id])
	}
	return out
}
