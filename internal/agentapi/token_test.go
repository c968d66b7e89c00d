package agentapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

func nextOf(t *testing.T, h *harness, token string) agentapi.Instruction {
	t.Helper()
	w := h.do(http.MethodGet, agentapi.PathNext, token, "")
	wantStatus(t, w, http.StatusOK, "")
	var ins agentapi.Instruction
	if err := json.Unmarshal(w.Body.Bytes(), &ins); err != nil {
		t.Fatal(err)
	}
	return ins
}

// A token is its instance's identity: two agents, each token moves and
// reads its own row only, and nothing in a request can name another.
func TestATokenActsOnlyForItsInstance(t *testing.T) {
	h := newHarness(t)
	a, tokenA := h.launched("bp-a")
	b, tokenB := h.launched("bp-b")

	wantStatus(t, h.signal(tokenA, agentapi.SignalRequest{Kind: "warm"}), http.StatusNoContent, "")
	if got := h.Get(a.ID).State; got != domain.StateReady {
		t.Fatalf("a is %s after its warm signal, want ready", got)
	}
	h.WantUnchanged(h.Get(b.ID))
	bBefore := h.Get(b.ID)

	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, tokenA, ""), http.StatusNoContent, "")
	if got := h.Get(a.ID).Heartbeat; !got.Equal(h.Clock.Now()) {
		t.Fatalf("a's heartbeat is %s, want %s", got, h.Clock.Now())
	}
	if !h.Get(b.ID).Heartbeat.IsZero() {
		t.Fatal("a's heartbeat reached b")
	}

	h.Assign(a.ID, 101, "jit-of-a")
	if ins := nextOf(t, h, tokenB); ins.Kind != "wait" || ins.JITConfig != "" {
		t.Fatalf("b was told %+v, want wait", ins)
	}
	if ins := nextOf(t, h, tokenA); ins.Kind != "run" || ins.JITConfig != "jit-of-a" || ins.JobID != 101 || ins.Job != "101" {
		t.Fatalf("a was told %+v, want to run job 101 with its own config", ins)
	}

	// b's token cannot report a's job, and a request cannot name a's row.
	wantStatus(t, h.signal(tokenB, agentapi.SignalRequest{Kind: "registered", Job: "101"}), http.StatusConflict, agentapi.CodeRejected)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathSignal, tokenB, `{"kind":"registered","job":"101","cloud_id":"i-bp-a"}`),
		http.StatusBadRequest, agentapi.CodeBadRequest)
	if got := h.Get(a.ID); got.State != domain.StateClaimed {
		t.Fatalf("b's token moved a to %s", got.State)
	}
	h.WantUnchanged(bBefore)

	wantStatus(t, h.signal(tokenA, agentapi.SignalRequest{Kind: "registered", Job: "101"}), http.StatusNoContent, "")
	if got := h.Get(a.ID).State; got != domain.StateRunning {
		t.Fatalf("a is %s after registering, want running", got)
	}
	// b's attempt reached the control plane as b's, and was refused there.
	rejected := h.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalRegistered))
	if rejected.CloudID != b.CloudID || rejected.Err == nil {
		t.Fatalf("b's registered signal went through as %+v", rejected)
	}
}

func TestUnknownOrMissingTokensAreRefused(t *testing.T) {
	h := newHarness(t)
	in, _ := h.launched("bp-1")
	for _, token := range []string{"", domain.NewSecret(), domain.HashSecret("x"), in.AgentTokenHash} {
		h.wantEveryCallUnauthorized(token, func(w *httptest.ResponseRecorder) {
			if w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	// The stored hash is not a token either.
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, h.Get("bp-1").AgentTokenHash, ""),
		http.StatusUnauthorized, agentapi.CodeUnauthorized)
	if h.Calls.Count(func(agentapitest.Call) bool { return true }) != 0 {
		t.Fatal("an unauthenticated call reached the control plane")
	}
}

func TestATokenExpiresWithItsInstance(t *testing.T) {
	for _, end := range []domain.State{domain.StateTerminating, domain.StateTerminated} {
		t.Run(string(end), func(t *testing.T) {
			h := newHarness(t)
			in, token := h.launched("bp-1")
			h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminating })
			if end == domain.StateTerminated {
				h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminated })
			}
			for _, req := range []struct{ method, path, body string }{
				{http.MethodPost, agentapi.PathHeartbeat, ""},
				{http.MethodGet, agentapi.PathNext, ""},
				{http.MethodPost, agentapi.PathSignal, `{"kind":"failed","reason":"x"}`},
			} {
				e := wantStatus(t, h.do(req.method, req.path, token, req.body), http.StatusUnauthorized, agentapi.CodeInstanceEnded)
				if e.Error != "token expired with its instance" {
					t.Fatalf("message %q", e.Error)
				}
			}
		})
	}
}

// A row that is deleted (terminated and forgotten) takes its token along.
func TestATokenOfADeletedRowIsUnknown(t *testing.T) {
	h := newHarness(t)
	in, token := h.launched("bp-1")
	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminating })
	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminated })
	if err := h.Store.DeleteInstances(h.Ctx, []string{in.ID}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusUnauthorized, agentapi.CodeUnauthorized)
}

// An instance in error keeps its token: its agent may still report.
func TestAnInstanceInErrorKeepsItsToken(t *testing.T) {
	h := newHarness(t)
	in, token := h.launched("bp-1")
	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateError })
	h.Clock.Advance(time.Second)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusNoContent, "")
}

// wantEveryCallUnauthorized makes each call that needs a token with token,
// fails unless it is refused as unauthorized, and checks the refusal with
// check.
func (h *harness) wantEveryCallUnauthorized(token string, check func(w *httptest.ResponseRecorder)) {
	h.t.Helper()
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, agentapi.PathHeartbeat, ""},
		{http.MethodGet, agentapi.PathNext, ""},
		{http.MethodPost, agentapi.PathSignal, `{"kind":"warm"}`},
	} {
		w := h.do(req.method, req.path, token, req.body)
		wantStatus(h.t, w, http.StatusUnauthorized, agentapi.CodeUnauthorized)
		check(w)
	}
}

// tokenQueries counts the look-ups of instances by token hash, the
// listings by state, and the reads of rows by id. lagging makes it a store
// whose index of token hashes has not caught up with the writes yet, as
// DynamoDB's global secondary indexes trail the table: a look-up by token
// finds nothing.
type tokenQueries struct {
	*sqlite.Store
	lagging        bool
	n, lists, gets atomic.Int64
}

func (s *tokenQueries) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	s.gets.Add(1)
	return s.Store.GetInstance(ctx, id)
}

func (s *tokenQueries) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	if f.TokenHash != "" {
		s.n.Add(1)
		if s.lagging {
			return nil, nil
		}
	}
	if len(f.States) > 0 {
		s.lists.Add(1)
	}
	return s.Store.ListInstances(ctx, f)
}

// server returns another server over store, as another replica, logging
// into the harness's logs.
func (h *harness) server(store agentapi.Store) *agentapi.Server {
	return agentapi.New(store, h.Calls, h.Clock, slog.New(slog.NewTextHandler(h.Logs, nil)), nil)
}

// bareToken writes a booting instance holding a token as servers issued
// them before tokens named their instance: a bare secret.
func (h *harness) bareToken(id string) (domain.Instance, string) {
	h.t.Helper()
	token := domain.NewSecret()
	h.Launch(id, domain.StateBooting, domain.NewSecret())
	return h.Move(id, func(i *domain.Instance) { i.AgentTokenHash = domain.HashSecret(token) }), token
}

// A token names its instance, so it is checked on a read of that row by id,
// never through the store's index of token hashes: on a store whose index
// trails its writes, the agent's first calls after hello are served, by
// the replica that said hello and by any other.
func TestATokenIsCheckedOnTheRowItNames(t *testing.T) {
	h := newHarness(t)
	store := &tokenQueries{Store: h.Store, lagging: true}
	h.Server = h.server(store)
	in, token := h.launched("bp-1")
	for _, srv := range []*agentapi.Server{h.Server, h.server(store)} {
		h.Server = srv
		wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusNoContent, "")
		if ins := nextOf(t, h, token); ins.Kind != "wait" {
			t.Fatalf("next answered %+v", ins)
		}
	}
	wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "warm"}), http.StatusNoContent, "")
	if got := h.Get(in.ID).State; got != domain.StateReady {
		t.Fatalf("bp-1 is %s after its warm signal, want ready", got)
	}
	if got := store.n.Load(); got != 0 {
		t.Fatalf("%d look-ups by token hash, want none", got)
	}
	if id, _, named := strings.Cut(token, "."); !named || id != in.ID {
		t.Fatalf("hello issued a token that does not name %s", in.ID)
	}

	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateTerminating })
	wantStatus(t, h.do(http.MethodGet, agentapi.PathNext, token, ""), http.StatusUnauthorized, agentapi.CodeInstanceEnded)
}

// The instance a token names must hold the hash of the whole token: a
// secret presented with another instance's id, or a token that names no
// instance there is, is refused, and says nothing of the secret.
func TestATokenNamingAnotherInstanceIsRefused(t *testing.T) {
	h := newHarness(t)
	_, tokenA := h.launched("bp-a")
	_, tokenB := h.launched("bp-b")
	a, b := h.Get("bp-a"), h.Get("bp-b")
	_, secretA, _ := strings.Cut(tokenA, ".")
	_, secretB, _ := strings.Cut(tokenB, ".")
	store := &tokenQueries{Store: h.Store}
	h.Server = h.server(store)
	for _, token := range []string{
		b.ID + "." + secretA, a.ID + "." + secretB, b.ID + "." + tokenA, "bp-c." + secretA,
		secretA, a.ID + "." + domain.HashSecret(tokenA), a.ID + ".",
	} {
		h.wantEveryCallUnauthorized(token, func(w *httptest.ResponseRecorder) {
			for _, secret := range []string{secretA, secretB} {
				if strings.Contains(w.Body.String(), secret) {
					t.Fatalf("a refusal tells a secret: %s", w.Body)
				}
			}
		})
	}
	h.WantUnchanged(a)
	h.WantUnchanged(b)
	if h.Calls.Count(func(agentapitest.Call) bool { return true }) != 0 {
		t.Fatal("an unauthenticated call reached the control plane")
	}
	if logs := h.Logs.String(); strings.Contains(logs, secretA) || strings.Contains(logs, secretB) {
		t.Fatal("a secret is in the logs")
	}

	// A token that could not have been issued is refused without a read.
	gets := store.gets.Load()
	for _, token := range []string{"." + secretA, a.ID + ".short", strings.Repeat("x", 300) + "." + secretA} {
		wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusUnauthorized, agentapi.CodeUnauthorized)
	}
	if got := store.gets.Load(); got != gets {
		t.Fatalf("malformed tokens made %d reads", got-gets)
	}
}

// A bare token, issued before tokens named their instance, is still
// accepted: it is found by its hash once; later requests read its instance
// by id, which on a store like DynamoDB is a key look-up instead of an
// index query per request, and a heartbeat reads it at most once per
// HeartbeatAuthFresh. The row read must still hold the token.
func TestABareTokenIsLookedUpOnceThenReadByID(t *testing.T) {
	h := newHarness(t)
	in, token := h.bareToken("bp-1")
	counted := h.threeCountedHeartbeats(token)
	counted.wantLookupsAndReads(t, "three heartbeats", 1, 0)
	h.Move(in.ID, endedInTest)
	// A signal reads the row: the token died with its instance.
	wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "warm"}), http.StatusUnauthorized, agentapi.CodeInstanceEnded)
	if got := counted.n.Load(); got != 1 {
		t.Fatalf("%d look-ups by token, want still 1: the instance is read by id", got)
	}
	_, token2 := h.bareToken("bp-2")
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token2, ""), http.StatusNoContent, "")
	h.Move("bp-2", endedInTest)
	// A heartbeat is refused once its reading is older than the window.
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token2, ""), http.StatusNoContent, "")
	h.Clock.Advance(agentapi.HeartbeatAuthFresh)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token2, ""), http.StatusUnauthorized, agentapi.CodeInstanceEnded)
}

// A token naming its instance is read by id from the first request, and a
// heartbeat reads it at most once per HeartbeatAuthFresh, as a bare one.
func TestANamedTokenIsReadByIDAndNeverLookedUp(t *testing.T) {
	h := newHarness(t)
	_, token := h.launched("bp-1")
	counted := h.threeCountedHeartbeats(token)
	counted.wantLookupsAndReads(t, "three heartbeats", 0, 1)
	h.Clock.Advance(agentapi.HeartbeatAuthFresh)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusNoContent, "")
	counted.wantLookupsAndReads(t, "a heartbeat past the window", 0, 2)
}

// threeCountedHeartbeats serves the harness from a store counting its
// look-ups by token and reads by id, sends three heartbeats with token,
// and returns that store.
func (h *harness) threeCountedHeartbeats(token string) *tokenQueries {
	h.t.Helper()
	counted := &tokenQueries{Store: h.Store}
	h.Server = agentapi.New(counted, h.Service, h.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for range 3 {
		wantStatus(h.t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusNoContent, "")
	}
	return counted
}

func (s *tokenQueries) wantLookupsAndReads(t *testing.T, after string, lookups, reads int64) {
	t.Helper()
	if gotLookups, gotReads := s.n.Load(), s.gets.Load(); gotLookups != lookups || gotReads != reads {
		t.Fatalf("%s: %d look-ups by token and %d reads by id, want %d and %d", after, gotLookups, gotReads, lookups, reads)
	}
}

// endedInTest moves an instance to terminating, where its token dies.
func endedInTest(i *domain.Instance) { i.State, i.Reason = domain.StateTerminating, "test" }
