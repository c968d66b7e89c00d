package agentapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A signal or an answered poll reads the agent's row once: the reading
// that checks its token is the one the service acts on. On DynamoDB each
// read is a request, and agents' polls are most of a fleet's reads.
func TestASignalOrAPollReadsTheRowOnce(t *testing.T) {
	h := newHarness(t)
	in, token := h.launched("bp-1")
	reads := &tokenQueries{Store: h.Store}
	svc, err := agents.New(reads, h.Queue, h.Clock, nil, nil, agents.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := agentapi.New(reads, svc, h.Clock, nil, nil)
	call := func(method, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	// The first request finds the token by its hash; later ones read the
	// row by id.
	wantStatus(t, call(http.MethodPost, agentapi.PathHeartbeat, ""), http.StatusNoContent, "")

	for _, c := range []struct{ name, method, path, body string }{
		{"warm signal", http.MethodPost, agentapi.PathSignal, `{"kind":"warm"}`},
		{"poll", http.MethodGet, agentapi.PathNext, ""},
	} {
		before := reads.gets.Load()
		w := call(c.method, c.path, c.body)
		if w.Code >= 300 {
			t.Fatalf("%s: %d %s", c.name, w.Code, w.Body)
		}
		if got := reads.gets.Load() - before; got != 1 {
			t.Errorf("%s read the row %d times, want once", c.name, got)
		}
	}
	if got := h.Get(in.ID).State; got != domain.StateReady {
		t.Fatalf("after warm the instance is %s, want ready", got)
	}
}
