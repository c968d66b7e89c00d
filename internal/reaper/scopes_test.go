package reaper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v88/github"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// scopeFaults is GitHub failing every look at some scopes, as a client
// reports it: naming the call and the scope.
type scopeFaults struct {
	domain.GitHub
	fail map[domain.Scope]error
}

func (g scopeFaults) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	if err := g.fail[s]; err != nil {
		return nil, fmt.Errorf("list runners of %s: %w", s, err)
	}
	return g.GitHub.ListRunners(ctx, s)
}

func (g scopeFaults) QueuedJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error) {
	if err := g.fail[s]; err != nil {
		return nil, fmt.Errorf("list queued jobs of %s: %w", s, err)
	}
	return g.GitHub.QueuedJobs(ctx, s)
}

var (
	broken  = domain.Scope{Owner: "broken", Repo: "app"}
	deleted = domain.Scope{Owner: "acme", Repo: "deleted"}
	hidden  = domain.Scope{Owner: "acme", Repo: "hidden"}
)

// answered is the REST client's error for GitHub answering status.
func answered(status int) error {
	return rest.Classify("GitHub call", &github.ErrorResponse{
		Response: &http.Response{StatusCode: status, Header: http.Header{}},
		Message:  http.StatusText(status),
	}, nil)
}

// lookingAt has the reconciler look at scopes on GitHub gh, and returns
// what it logs.
func (x *fixture) lookingAt(gh domain.GitHub, scopes ...domain.Scope) *bytes.Buffer {
	x.T.Helper()
	var logs bytes.Buffer
	x.r = &Reconciler{
		Store: x.Store, Queue: x.Queue, Cloud: x.cloud, GitHub: gh, Clock: x.Clock, ControllerID: "ctl", Ours: ours,
		Log:    slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Scopes: func(context.Context) []domain.Scope { return scopes },
	}
	if err := x.r.Init(nil); err != nil {
		x.T.Fatal(err)
	}
	return &logs
}

func (x *fixture) scopeOutcomes(outcome string) float64 {
	return testutil.ToFloat64(x.r.metrics.scopes.WithLabelValues(outcome))
}

// A scope GitHub keeps failing for (an account the App was uninstalled
// from) is logged and counted each cycle, and fails no cycle while
// another scope answers; the others are looked after as ever.
func TestOneFailingScopeDoesNotFailTheCycle(t *testing.T) {
	x := newFixture(t)
	logs := x.lookingAt(scopeFaults{x.gh, map[domain.Scope]error{broken: errors.New("the GitHub App is not installed on this account")}}, broken, scope)
	x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"runs-on=1"}})
	for i := range 3 {
		x.Clock.Advance(time.Minute)
		rep, err := x.r.Cycle(x.Ctx)
		if err != nil {
			t.Fatalf("cycle %d failed for one scope: %v", i, err)
		}
		if want := (ScopeOutcomes{OK: 1, Failed: 1}); rep.Scopes != want {
			t.Fatalf("cycle %d: scopes %+v, want %+v", i, rep.Scopes, want)
		}
		if i == 0 && rep.Recovered != 1 {
			t.Fatalf("the scope that answers was not looked after: %+v", rep)
		}
	}
	if got, want := x.scopeOutcomes("failed"), 3.0; got != want {
		t.Fatalf("failed scopes counted %v, want %v", got, want)
	}
	if got, want := x.scopeOutcomes("ok"), 3.0; got != want {
		t.Fatalf("answered scopes counted %v, want %v", got, want)
	}
	warned := 0
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "scope=broken/app") {
			warned++
		}
	}
	if warned != 3 {
		t.Fatalf("the failing scope was warned about %d times in 3 cycles, want 3:\n%s", warned, logs)
	}
}

// When GitHub answers for no scope, the step fails, with GitHub's error
// wrapped once.
func TestEveryScopeFailingFailsTheCycle(t *testing.T) {
	x := newFixture(t)
	x.gh.FailNext(ghsim.OpListRunners, 1, errors.New("GitHub is down"))
	_, err := x.r.Cycle(x.Ctx)
	if err == nil {
		t.Fatal("the cycle succeeded while GitHub answered for no scope")
	}
	if n := strings.Count(err.Error(), "list runners of acme/app"); n != 1 {
		t.Fatalf("the error names the call %d times, want once: %v", n, err)
	}
	x.lookingAt(scopeFaults{x.gh, map[domain.Scope]error{broken: errors.New("GitHub is down"), scope: errors.New("GitHub is down")}}, broken, scope)
	if _, err := x.r.Cycle(x.Ctx); err == nil || !strings.Contains(err.Error(), "all 2 scopes") {
		t.Fatalf("cycle error %v, want the failure of all 2 scopes", err)
	}
	if got := x.scopeOutcomes("failed"); got != 2 {
		t.Fatalf("failed scopes counted %v, want 2", got)
	}
}

// A scope GitHub says is gone (410) fails nothing, even alone, and is
// logged once a cycle although both of its looks fail.
func TestGoneScopeFailsNothing(t *testing.T) {
	x := newFixture(t)
	gh := scopeFaults{x.gh, map[domain.Scope]error{deleted: answered(http.StatusGone)}}
	for _, scopes := range [][]domain.Scope{{deleted}, {deleted, scope}} {
		logs := x.lookingAt(gh, scopes...)
		for i := range 2 {
			x.Clock.Advance(time.Minute)
			rep, err := x.r.Cycle(x.Ctx)
			if err != nil {
				t.Fatalf("%v, cycle %d failed for a gone scope: %v", scopes, i, err)
			}
			if want := (ScopeOutcomes{OK: len(scopes) - 1, Gone: 1}); rep.Scopes != want {
				t.Fatalf("%v: scopes %+v, want %+v", scopes, rep.Scopes, want)
			}
		}
		if n := strings.Count(logs.String(), "scope=acme/deleted"); n != 2 {
			t.Fatalf("%v: the gone scope was logged %d times in 2 cycles, want 2:\n%s", scopes, n, logs)
		}
		if got := x.scopeOutcomes("gone"); got != 2 {
			t.Fatalf("%v: gone scopes counted %v, want 2", scopes, got)
		}
	}
}

// A scope GitHub answers 404 for may be one the credentials lost access
// to: it is a failure, warned about as such, and alone it fails the step
// (the health goes red rather than the reaper going blind). Beside a scope
// that answers, it fails nothing.
func TestNotFoundScopeFails(t *testing.T) {
	x := newFixture(t)
	if err := answered(http.StatusNotFound); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the client's 404 is %v, want domain.ErrNotFound", err)
	}
	gh := scopeFaults{x.gh, map[domain.Scope]error{hidden: answered(http.StatusNotFound)}}
	logs := x.lookingAt(gh, hidden)
	x.Clock.Advance(time.Minute)
	rep, err := x.r.Cycle(x.Ctx)
	if err == nil || !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("cycle error %v, want the 404 of the only scope", err)
	}
	if want := (ScopeOutcomes{Failed: 1}); rep.Scopes != want {
		t.Fatalf("scopes %+v, want %+v", rep.Scopes, want)
	}
	if got := x.scopeOutcomes("failed"); got != 1 {
		t.Fatalf("failed scopes counted %v, want 1", got)
	}
	if got := x.scopeOutcomes("gone"); got != 0 {
		t.Fatalf("gone scopes counted %v, want 0", got)
	}
	var warning string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "scope=acme/hidden") {
			warning = line
		}
	}
	if !strings.Contains(warning, "lost access") || !strings.Contains(warning, "deleted") {
		t.Fatalf("no warning naming the scope and saying access may be lost or the repository deleted:\n%s", logs)
	}

	x.lookingAt(gh, hidden, scope)
	x.Clock.Advance(time.Minute)
	rep, err = x.r.Cycle(x.Ctx)
	if err != nil {
		t.Fatalf("the cycle failed for one scope of two: %v", err)
	}
	if want := (ScopeOutcomes{OK: 1, Failed: 1}); rep.Scopes != want {
		t.Fatalf("scopes %+v, want %+v", rep.Scopes, want)
	}
}

// failingJobReads is a store whose job reads fail.
type failingJobReads struct{ Store }

func (s failingJobReads) GetJob(context.Context, int64) (domain.Job, error) {
	return domain.Job{}, errors.New("store unavailable")
}

// The store failing while GitHub answers for every scope still fails the
// step.
func TestStoreFailureWhileLookingAtScopesFailsTheCycle(t *testing.T) {
	x := newFixture(t)
	x.r.Store = failingJobReads{x.Store}
	x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"runs-on=1"}})
	rep, err := x.r.Cycle(x.Ctx)
	if err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("cycle error %v, want the store's", err)
	}
	if want := (ScopeOutcomes{OK: 1}); rep.Scopes != want {
		t.Fatalf("scopes %+v, want %+v: GitHub answered", rep.Scopes, want)
	}
}
