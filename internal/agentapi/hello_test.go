package agentapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestHelloIssuesTheTokenOnce(t *testing.T) {
	h := newHarness(t)
	secret := domain.NewSecret()
	before := h.Launch("bp-1", domain.StateBooting, secret)

	resp := h.helloAnswer(helloBody(before.CloudID, before.LaunchID, secret))
	if secret, named := strings.CutPrefix(resp.Token, "bp-1."); resp.InstanceID != "bp-1" || resp.HeartbeatSeconds != 5 ||
		!named || !domain.ValidSecret(secret) {
		t.Fatalf("hello answered %+v, want a token of bp-1 and 64 hex digits", resp)
	}
	after := h.Get("bp-1")
	if after.AgentTokenHash != domain.HashSecret(resp.Token) {
		t.Fatal("the row does not hold the token's hash")
	}
	if after.State != before.State || after.Version != before.Version+1 || after.Job != before.Job {
		t.Fatalf("hello changed more than the token: %+v", after)
	}

	h.wantTokenWithheld(helloBody(before.CloudID, before.LaunchID, secret), resp.Token)
	h.WantUnchanged(after)
}

// An agent that proposes its token's secret can retry a hello whose answer
// it lost: the retry proposing the same secret gets the same token again
// without a write, while a hello proposing another secret, or none, still
// finds it issued. A proposed secret must look drawn at random.
func TestHelloWithAProposedTokenCanBeRetried(t *testing.T) {
	h := newHarness(t)
	secret := domain.NewSecret()
	in := h.Launch("bp-1", domain.StateBooting, secret)
	proposing := func(token string) string {
		b, _ := json.Marshal(agentapi.HelloRequest{CloudID: in.CloudID, LaunchID: in.LaunchID, Bootstrap: secret, Token: token})
		return string(b)
	}
	for _, bad := range []string{"short", strings.Repeat("G", 64), strings.Repeat("A", 64), "bp-1." + domain.NewSecret()} {
		wantStatus(t, h.do(http.MethodPost, agentapi.PathHello, "", proposing(bad)), http.StatusBadRequest, agentapi.CodeBadRequest)
	}
	h.WantUnchanged(in)

	token := domain.NewSecret()
	for range 2 {
		if resp := h.helloAnswer(proposing(token)); resp.Token != "bp-1."+token || resp.InstanceID != "bp-1" {
			t.Fatalf("hello proposing a token answered %+v", resp)
		}
	}
	issued := h.Get("bp-1")
	if issued.AgentTokenHash != domain.HashSecret("bp-1."+token) || issued.Version != in.Version+1 {
		t.Fatalf("row after a hello and its retry: version %d (want %d), hash of the proposed token %v",
			issued.Version, in.Version+1, issued.AgentTokenHash == domain.HashSecret("bp-1."+token))
	}
	for _, other := range []string{domain.NewSecret(), ""} {
		h.wantTokenWithheld(proposing(other), token)
	}
	h.WantUnchanged(issued)
}

// A hello retried across the upgrade to tokens naming their instance, whose
// first answer was a bare token, is given that token back, and the server
// that gave it serves it without the store's index of token hashes, which
// may not have caught up with the write yet.
func TestHelloRetriedAcrossTheUpgradeGetsTheBareToken(t *testing.T) {
	h := newHarness(t)
	secret, token := domain.NewSecret(), domain.NewSecret()
	h.Launch("bp-1", domain.StateBooting, secret)
	in := h.Move("bp-1", func(i *domain.Instance) { i.AgentTokenHash = domain.HashSecret(token) })
	store := &tokenQueries{Store: h.Store, lagging: true}
	h.Server = h.server(store)
	b, _ := json.Marshal(agentapi.HelloRequest{CloudID: in.CloudID, LaunchID: in.LaunchID, Bootstrap: secret, Token: token})
	if resp := h.helloAnswer(string(b)); resp.Token != token || resp.InstanceID != "bp-1" {
		t.Fatalf("hello retried across the upgrade answered %+v, want the bare token", resp)
	}
	h.WantUnchanged(in)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusNoContent, "")
	if got := store.n.Load(); got != 0 {
		t.Fatalf("%d look-ups by token hash, want none", got)
	}
}

// Of two hellos at once, one gets the token; the other learns it is taken.
func TestConcurrentHellosIssueOneToken(t *testing.T) {
	h := newHarness(t)
	secret := domain.NewSecret()
	in := h.Launch("bp-1", domain.StateBooting, secret)
	codes := make([]int, 8)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			codes[i] = h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, secret)).Code
		})
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
		default:
			t.Fatalf("hello answered %d", c)
		}
	}
	if ok != 1 {
		t.Fatalf("%d hellos got a token, want 1 (codes %v)", ok, codes)
	}
}

func TestHelloRefused(t *testing.T) {
	secret := domain.NewSecret()
	for _, tc := range []struct {
		name   string
		state  domain.State
		body   func(in domain.Instance) string
		status int
		code   string
		want   string // in the message
	}{
		{"wrong bootstrap secret", domain.StateBooting, func(in domain.Instance) string {
			return helloBody(in.CloudID, in.LaunchID, domain.NewSecret())
		}, http.StatusUnauthorized, agentapi.CodeUnauthorized, "do not match"},
		{"another launch", domain.StateBooting, func(in domain.Instance) string {
			return helloBody(in.CloudID, "lt-other", secret)
		}, http.StatusUnauthorized, agentapi.CodeUnauthorized, "do not match"},
		{"cloud id not recorded yet", domain.StateBooting, func(in domain.Instance) string {
			return helloBody("i-not-yet", in.LaunchID, secret)
		}, http.StatusServiceUnavailable, agentapi.CodeUnavailable, "i-not-yet"},
		{"terminating instance", domain.StateTerminating, func(in domain.Instance) string {
			return helloBody(in.CloudID, in.LaunchID, secret)
		}, http.StatusUnauthorized, agentapi.CodeInstanceEnded, "terminating"},
		{"instance in error", domain.StateError, func(in domain.Instance) string {
			return helloBody(in.CloudID, in.LaunchID, secret)
		}, http.StatusUnauthorized, agentapi.CodeInstanceEnded, "error"},
		{"missing fields", domain.StateBooting, func(in domain.Instance) string {
			return `{"cloud_id":"` + in.CloudID + `"}`
		}, http.StatusBadRequest, agentapi.CodeBadRequest, "launch_id, bootstrap"},
		{"malformed JSON", domain.StateBooting, func(domain.Instance) string { return `{"cloud_id":` },
			http.StatusBadRequest, agentapi.CodeBadRequest, "malformed JSON"},
		{"empty body", domain.StateBooting, func(domain.Instance) string { return `` },
			http.StatusBadRequest, agentapi.CodeBadRequest, "empty body"},
		{"unknown field", domain.StateBooting, func(in domain.Instance) string {
			return `{"cloud_id":"x","launch_id":"y","bootstrap":"z","instance_id":"bp-2"}`
		}, http.StatusBadRequest, agentapi.CodeBadRequest, "instance_id"},
		{"body too large", domain.StateBooting, func(in domain.Instance) string {
			return `{"cloud_id":"` + strings.Repeat("x", agentapi.MaxBody) + `"}`
		}, http.StatusRequestEntityTooLarge, agentapi.CodeTooLarge, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			in := h.Launch("bp-1", tc.state, secret)
			w := h.do(http.MethodPost, agentapi.PathHello, "", tc.body(in))
			e := wantStatus(t, w, tc.status, tc.code)
			if !strings.Contains(e.Error, tc.want) {
				t.Fatalf("message %q does not say %q", e.Error, tc.want)
			}
			h.WantUnchanged(in)
			if h.Get(in.ID).AgentTokenHash != "" {
				t.Fatal("a refused hello issued a token")
			}
		})
	}
}

// A row without a bootstrap hash (written before credentials existed)
// matches no secret, not even the empty one.
func TestHelloNeedsABootstrapHash(t *testing.T) {
	h := newHarness(t)
	in := h.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateBooting, LaunchID: "lt-1"})
	for _, secret := range []string{"", " ", domain.NewSecret()} {
		w := h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, secret))
		if w.Code != http.StatusUnauthorized && w.Code != http.StatusBadRequest {
			t.Fatalf("secret %q: status %d, want 401 or 400", secret, w.Code)
		}
	}
	h.WantUnchanged(in)
}
