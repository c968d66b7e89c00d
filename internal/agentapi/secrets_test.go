package agentapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Every credential of a whole life (bootstrap secret, token, JIT config)
// stays out of the logs, and the token and the bootstrap secret out of
// every answer but hello's.
func TestCredentialsNeverLeak(t *testing.T) {
	h := newHarness(t)
	h.SetPolicy(agents.Policy{Reuse: true})
	secret, wrong, jit := domain.NewSecret(), domain.NewSecret(), "jit-"+domain.NewSecret()
	in := h.Launch("bp-1", domain.StateBooting, secret)
	h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, wrong))
	h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, "lt-x", secret))
	token := h.hello(in, secret)
	h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, secret))

	h.signal(token, agentapi.SignalRequest{Kind: "warm"})
	h.do(http.MethodPost, agentapi.PathHeartbeat, token, "")
	h.Assign(in.ID, 101, jit)
	if ins := nextOf(t, h, token); ins.JITConfig != jit {
		t.Fatalf("next answered %+v", ins)
	}
	for _, req := range []agentapi.SignalRequest{
		{Kind: "registered", Job: "101"}, {Kind: "job-started", Job: "101"},
		{Kind: "registered", Job: "202"}, {Kind: "job-finished", Job: "101", Reason: "exit status 0"},
		{Kind: "deregistered"}, {Kind: "deregistered"}, {Kind: "bogus"},
	} {
		h.signal(token, req)
	}
	h.do(http.MethodPost, agentapi.PathHeartbeat, wrong, "")
	h.do(http.MethodPost, agentapi.PathHeartbeat, "x"+token, "")

	_, tokenSecret, _ := strings.Cut(token, ".")
	h.do(http.MethodPost, agentapi.PathHeartbeat, "bp-2."+tokenSecret, "")

	logs, answers := h.Logs.String(), h.answers()
	if !strings.Contains(logs, "agent said hello") {
		t.Fatalf("the test logged nothing to check:\n%s", logs)
	}
	for name, cred := range map[string]string{
		"bootstrap secret": secret, "wrong secret": wrong, "token": token, "token's secret": tokenSecret,
		"token hash": domain.HashSecret(token), "bootstrap hash": domain.HashSecret(secret),
	} {
		if strings.Contains(logs, cred) {
			t.Errorf("the %s is in the logs", name)
		}
		if strings.Contains(answers, cred) {
			t.Errorf("the %s is in an answer other than hello's", name)
		}
	}
	if strings.Contains(logs, jit) {
		t.Error("the JIT config is in the logs")
	}
}

func TestRequestsAreCountedWithoutIDs(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	srv := agentapi.New(h.Store, h.Service, h.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	agentapi.New(h.Store, h.Service, h.Clock, nil, reg) // a second server shares the series
	secret := domain.NewSecret()
	in := h.Launch("bp-1", domain.StateBooting, secret)
	call := func(method, path, token, body string) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		srv.ServeHTTP(httptest.NewRecorder(), r)
	}
	call(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, secret))
	call(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, secret))
	call(http.MethodPost, agentapi.PathHeartbeat, "nope", "")
	call(http.MethodGet, agentapi.Prefix+"bp-1", "", "")

	const want = `
# HELP bullpen_agentapi_requests_total Agent API requests by endpoint and outcome (ok, bad_request, too_large, unauthorized, instance_ended, token_issued, rejected, unavailable, not_found).
# TYPE bullpen_agentapi_requests_total counter
bullpen_agentapi_requests_total{endpoint="heartbeat",outcome="unauthorized"} 1
bullpen_agentapi_requests_total{endpoint="hello",outcome="ok"} 1
bullpen_agentapi_requests_total{endpoint="hello",outcome="token_issued"} 1
bullpen_agentapi_requests_total{endpoint="other",outcome="not_found"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bullpen_agentapi_requests_total"); err != nil {
		t.Fatal(err)
	}
}
