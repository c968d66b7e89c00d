package agentapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// harness calls the server in-process and keeps every answer's body but
// hello's, so tests can check that no credential leaks into one.
type harness struct {
	*agentapitest.ControlPlane
	t *testing.T

	mu     sync.Mutex
	bodies []string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	t.Parallel()
	return &harness{ControlPlane: agentapitest.New(t), t: t}
}

// do sends one request; token "" sends no Authorization header.
func (h *harness) do(method, path, token, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.Server.ServeHTTP(w, r)
	if path != agentapi.PathHello {
		h.mu.Lock()
		h.bodies = append(h.bodies, w.Body.String())
		h.mu.Unlock()
	}
	return w
}

func (h *harness) answers() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.bodies, "\n")
}

func helloBody(cloudID, launchID, secret string) string {
	b, _ := json.Marshal(agentapi.HelloRequest{CloudID: cloudID, LaunchID: launchID, Bootstrap: secret})
	return string(b)
}

// hello introduces in's agent and returns its token.
func (h *harness) hello(in domain.Instance, secret string) string {
	h.t.Helper()
	return h.helloAnswer(helloBody(in.CloudID, in.LaunchID, secret)).Token
}

// helloAnswer says hello with body and returns the answer, failing unless
// it was a welcome.
func (h *harness) helloAnswer(body string) agentapi.HelloResponse {
	h.t.Helper()
	w := h.do(http.MethodPost, agentapi.PathHello, "", body)
	if w.Code != http.StatusOK {
		h.t.Fatalf("hello: %d %s", w.Code, w.Body)
	}
	var resp agentapi.HelloResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// wantTokenWithheld says hello with body and fails unless the answer is
// that the instance's token was issued, without telling it.
func (h *harness) wantTokenWithheld(body, token string) {
	h.t.Helper()
	w := h.do(http.MethodPost, agentapi.PathHello, "", body)
	wantStatus(h.t, w, http.StatusConflict, agentapi.CodeTokenIssued)
	if strings.Contains(w.Body.String(), token) {
		h.t.Fatal("a hello was told the token issued before it")
	}
}

// launched writes a booting instance and introduces its agent.
func (h *harness) launched(id string) (domain.Instance, string) {
	h.t.Helper()
	secret := domain.NewSecret()
	in := h.Launch(id, domain.StateBooting, secret)
	return in, h.hello(in, secret)
}

func (h *harness) signal(token string, req agentapi.SignalRequest) *httptest.ResponseRecorder {
	h.t.Helper()
	b, _ := json.Marshal(req)
	return h.do(http.MethodPost, agentapi.PathSignal, token, string(b))
}

// wantStatus checks an answer's status and, for errors, its code.
func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int, code string) agentapi.ErrorResponse {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), status)
	}
	var e agentapi.ErrorResponse
	if code == "" {
		return e
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	if e.Code != code {
		t.Fatalf("code %q (%s), want %q", e.Code, e.Error, code)
	}
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	return e
}

type agentapiCall = agentapitest.Call
