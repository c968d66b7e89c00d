package agentapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// poll starts a long poll and returns where its answer will arrive.
func (h *harness) poll(ctx context.Context, token, wait string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, agentapi.PathNext+"?wait="+wait, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	go func() {
		w := httptest.NewRecorder()
		h.Server.ServeHTTP(w, r)
		out <- w
	}()
	return out
}

func instructionOf(t *testing.T, w *httptest.ResponseRecorder) agentapi.Instruction {
	t.Helper()
	wantStatus(t, w, http.StatusOK, "")
	var ins agentapi.Instruction
	if err := json.Unmarshal(w.Body.Bytes(), &ins); err != nil {
		t.Fatal(err)
	}
	return ins
}

// idle returns an introduced, warmed instance and its token.
func (h *harness) idle(id string) (domain.Instance, string) {
	h.t.Helper()
	in, token := h.launched(id)
	wantStatus(h.t, h.signal(token, agentapi.SignalRequest{Kind: "warm"}), http.StatusNoContent, "")
	return h.Get(in.ID), token
}

func TestLongPollWokenByAnAssignment(t *testing.T) {
	h := newHarness(t)
	in, token := h.idle("bp-1")
	start := h.Clock.Now()
	answer := h.poll(h.Ctx, token, "30s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next")) // asked once: "wait", and parked

	h.Assign(in.ID, 101, "jit-1")
	ins := instructionOf(t, <-answer)
	if ins.Kind != "run" || ins.JobID != 101 || ins.RunnerName != agentapitest.RunnerName(in.ID, 101) || ins.JITConfig != "jit-1" {
		t.Fatalf("woken with %+v, want to run job 101", ins)
	}
	if !h.Clock.Now().Equal(start) || h.Clock.Pending() != 0 {
		t.Fatalf("the answer waited for the clock (now %s, %d timers pending)", h.Clock.Now(), h.Clock.Pending())
	}
}

// With a store several replicas share, an assignment made on another
// replica sends this one no notice: the recheck finds it, with one listing
// for all the agents waiting.
func TestRecheckWakesAPollWhoseInstanceAnotherReplicaAssigned(t *testing.T) {
	h := newHarness(t)
	counted := &tokenQueries{Store: h.Store}
	h.Server = agentapi.New(counted, h.Calls, h.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, agentapi.WithRecheck(2*time.Second))
	in, token := h.idle("bp-1")
	_, other := h.idle("bp-2")
	answer := h.poll(h.Ctx, token, "30s")
	h.poll(h.Ctx, other, "30s")
	h.Calls.Await(t, 2, agentapitest.IsOp("next"))
	h.AssignElsewhere(in.ID, 101, "jit-1")
	if err := h.Server.Recheck(h.Ctx); err != nil {
		t.Fatal(err)
	}
	ins := instructionOf(t, <-answer)
	if ins.Kind != "run" || ins.JobID != 101 {
		t.Fatalf("answered %+v, want to run job 101", ins)
	}
	if got := counted.lists.Load(); got != 1 {
		t.Errorf("the recheck listed instances %d times, want once for every waiting agent", got)
	}
}

// Without a waiting agent, a recheck asks the store nothing.
func TestRecheckWithoutWaitersReadsNothing(t *testing.T) {
	h := newHarness(t)
	counted := &tokenQueries{Store: h.Store}
	srv := agentapi.New(counted, h.Calls, h.Clock, nil, nil, agentapi.WithRecheck(2*time.Second))
	if err := srv.Recheck(h.Ctx); err != nil || counted.lists.Load() != 0 {
		t.Fatalf("recheck with nobody waiting: %v, %d listings", err, counted.lists.Load())
	}
}

// A job's end with reuse wakes the agent with its release.
func TestLongPollWokenByARelease(t *testing.T) {
	h := newHarness(t)
	h.SetPolicy(agents.Policy{Reuse: true})
	_, token := h.running("bp-1")
	answer := h.poll(h.Ctx, token, "60s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next"))
	wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "job-finished", Job: "101"}), http.StatusNoContent, "")
	if ins := instructionOf(t, <-answer); ins.Kind != "release" {
		t.Fatalf("woken with %+v, want release", ins)
	}
}

func TestLongPollTimesOutToWait(t *testing.T) {
	for _, tc := range []struct {
		wait string
		held time.Duration
	}{
		{"30s", 30 * time.Second},
		{"30", 30 * time.Second},
		{"5m", agentapi.MaxWait}, // capped
	} {
		t.Run(tc.wait, func(t *testing.T) {
			h := newHarness(t)
			_, token := h.idle("bp-1")
			answer := h.poll(h.Ctx, token, tc.wait)
			h.Calls.Await(t, 1, agentapitest.IsOp("next"))
			due, ok := h.Clock.Next()
			if !ok || due.Sub(h.Clock.Now()) != tc.held {
				t.Fatalf("the poll is held until %s (pending %t), want %s from now", due, ok, tc.held)
			}
			h.Clock.Advance(tc.held)
			if ins := instructionOf(t, <-answer); ins.Kind != "wait" || ins.JITConfig != "" || ins.Job != "" {
				t.Fatalf("timed out with %+v, want a bare wait", ins)
			}
		})
	}
}

func TestNextWithoutWaitAnswersAtOnce(t *testing.T) {
	h := newHarness(t)
	_, token := h.idle("bp-1")
	if ins := nextOf(t, h, token); ins.Kind != "wait" {
		t.Fatalf("got %+v", ins)
	}
	if h.Clock.Pending() != 0 {
		t.Fatal("an immediate answer left a timer behind")
	}
	for _, bad := range []string{"soon", "-1s", "1.5"} {
		wantStatus(t, h.do(http.MethodGet, agentapi.PathNext+"?wait="+bad, token, ""), http.StatusBadRequest, agentapi.CodeBadRequest)
	}
}

// An instance that ends while its agent waits takes the token along.
func TestLongPollOfAnEndedInstance(t *testing.T) {
	h := newHarness(t)
	in, token := h.idle("bp-1")
	answer := h.poll(h.Ctx, token, "30s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next"))
	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminating })
	h.Server.Assigned(in.CloudID)
	wantStatus(t, <-answer, http.StatusUnauthorized, agentapi.CodeInstanceEnded)
}

// An agent that hangs up leaves no timer and no waiter behind.
func TestLongPollOfAnAgentThatHangsUp(t *testing.T) {
	h := newHarness(t)
	_, token := h.idle("bp-1")
	ctx, cancel := context.WithCancel(h.Ctx)
	answer := h.poll(ctx, token, "30s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next"))
	cancel()
	<-answer
	if h.Clock.Pending() != 0 {
		t.Fatal("the poll's timer outlived it")
	}
}

// Draining ends long polls at once, so an HTTP server's Shutdown is not
// held up by them, and holds no new one.
func TestDrainEndsLongPolls(t *testing.T) {
	h := newHarness(t)
	_, token := h.idle("bp-1")
	answer := h.poll(h.Ctx, token, "30s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next"))
	h.Server.Drain()
	wantStatus(t, <-answer, http.StatusServiceUnavailable, agentapi.CodeUnavailable)
	h.Server.Drain() // twice is fine
	if ins := instructionOf(t, <-h.poll(h.Ctx, token, "30s")); ins.Kind != "wait" {
		t.Fatalf("a poll while draining got %+v, want an immediate wait", ins)
	}
	if h.Clock.Pending() != 0 {
		t.Fatal("a poll while draining was held")
	}
}

// readThenAssign is a store whose next reading of an instance is followed,
// before it returns, by an assignment: one that lands between a long
// poll's reading of its row and its subscription to notices.
type readThenAssign struct {
	*sqlite.Store
	assign atomic.Pointer[func()]
}

func (s *readThenAssign) after() {
	if f := s.assign.Swap(nil); f != nil {
		(*f)()
	}
}

func (s *readThenAssign) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	defer s.after()
	return s.Store.GetInstance(ctx, id)
}

func (s *readThenAssign) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	defer s.after()
	return s.Store.ListInstances(ctx, f)
}

// An assignment whose notice comes after the long poll read its row and
// before it subscribed to notices still answers the poll at once.
func TestAnAssignmentBetweenAPollsReadingAndItsWaitIsNotMissed(t *testing.T) {
	h := newHarness(t)
	store := &readThenAssign{Store: h.Store}
	h.Server = agentapi.New(store, h.Calls, h.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	in, token := h.idle("bp-1")
	assign := func() { h.Assign(in.ID, 101, "jit-1") }
	store.assign.Store(&assign)
	answer := h.poll(h.Ctx, token, "30s")
	h.Calls.Await(t, 1, agentapitest.IsOp("next"))
	h.Clock.Advance(30 * time.Second) // a poll that missed the notice answers "wait" now
	if ins := instructionOf(t, <-answer); ins.Kind != "run" || ins.JobID != 101 {
		t.Fatalf("answered %+v, want to run job 101", ins)
	}
}
