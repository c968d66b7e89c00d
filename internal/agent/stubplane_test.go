package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
)

// stubPlane is a scripted control plane: hello gives instance bp-1 token
// "tok", heartbeats are accepted, the first long poll is answered with job
// (when set) and later ones wait, and each signal is answered with the
// status answer gives it (204 without one). It counts what the agent asked,
// and a test can wait for the counts.
type stubPlane struct {
	mu      sync.Mutex
	changed chan struct{} // closed and renewed at every count
	signals map[string]int
	beats   int
	nexts   int

	job    *agentapi.Instruction
	answer func(kind string, n int) int // status for the nth signal of a kind
}

func newStubPlane(t *testing.T, job *agentapi.Instruction, answer func(kind string, n int) int) (*stubPlane, *httptest.Server) {
	s := &stubPlane{signals: map[string]int{}, changed: make(chan struct{}), job: job, answer: answer}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *stubPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case agentapi.PathHello:
		welcomeBP1(w)
	case agentapi.PathHeartbeat:
		s.count(func() { s.beats++ })
		w.WriteHeader(http.StatusNoContent)
	case agentapi.PathNext:
		var n int
		s.count(func() { s.nexts++; n = s.nexts })
		if n == 1 && s.job != nil {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(s.job)
			return
		}
		<-r.Context().Done() // nothing more to do
	case agentapi.PathSignal:
		var req agentapi.SignalRequest
		json.NewDecoder(r.Body).Decode(&req)
		var n int
		s.count(func() { s.signals[req.Kind]++; n = s.signals[req.Kind] })
		status := http.StatusNoContent
		if s.answer != nil {
			status = s.answer(req.Kind, n)
		}
		if status != http.StatusNoContent {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		if status != http.StatusNoContent {
			json.NewEncoder(w).Encode(agentapi.ErrorResponse{Error: "no", Code: map[int]string{
				http.StatusConflict: agentapi.CodeRejected, http.StatusServiceUnavailable: agentapi.CodeUnavailable}[status]})
		}
	}
}

// count changes the counts with f and wakes whoever waits on them.
func (s *stubPlane) count(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// read runs f with the counts held still.
func (s *stubPlane) read(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// await waits until cond holds on the counts.
func (s *stubPlane) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		ok, changed := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// reached returns a channel closed once cond holds on the counts.
func (s *stubPlane) reached(t *testing.T, cond func() bool) <-chan struct{} {
	done, stop := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			s.mu.Lock()
			ok, changed := cond(), s.changed
			s.mu.Unlock()
			if ok {
				close(done)
				return
			}
			select {
			case <-changed:
			case <-stop:
				return
			}
		}
	}()
	return done
}
