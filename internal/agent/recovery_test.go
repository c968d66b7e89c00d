package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/clock"
)

// outagePlane is a control plane behind a balancer that answers 502 to
// heartbeats and long polls while down; hello and signals always get
// through. Once up, a long poll is noted with the virtual time it came at
// and held until the agent gives up on it.
type outagePlane struct {
	clk *clock.Virtual

	mu        sync.Mutex
	down      bool
	failed    int         // long polls answered 502
	polledAt  []time.Time // long polls that reached the control plane
	pollsSeen chan struct{}
}

func (p *outagePlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	switch r.URL.Path {
	case agentapi.PathHello:
		welcomeBP1(w)
	case agentapi.PathHeartbeat:
		if down {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case agentapi.PathNext:
		p.mu.Lock()
		if down {
			p.failed++
			p.mu.Unlock()
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		p.polledAt = append(p.polledAt, p.clk.Now())
		close(p.pollsSeen)
		p.pollsSeen = make(chan struct{})
		p.mu.Unlock()
		<-r.Context().Done()
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// After an outage the long poll is asked again as soon as any call finds
// the control plane back (here the next heartbeat, 4 s later), not at the
// end of the 30 s backoff it had grown to: an instance waiting for an
// instruction (a reused one to be checked within seconds) would miss it.
func TestTheControlPlaneBackEndsTheBackoff(t *testing.T) {
	r := newRig(t)
	p := &outagePlane{clk: clock.NewVirtual(agentapitest.T0), down: true, pollsSeen: make(chan struct{})}
	r.startBP1On(p.clk, p)

	// Long polls fail at 0, 1, 3, 7, 15 and 31 s: the last one waits 30 s.
	// Heartbeats fail every 5 s.
	for {
		p.clk.BlockUntil(2) // the heartbeat's interval and the long poll's backoff
		p.mu.Lock()
		failed := p.failed
		p.mu.Unlock()
		if failed == 6 {
			break
		}
		next, _ := p.clk.Next()
		p.clk.AdvanceTo(next)
	}
	if at := p.clk.Now().Sub(agentapitest.T0); at != 31*time.Second {
		t.Fatalf("the sixth long poll failed at +%s, want +31s", at)
	}
	if next, _ := p.clk.Next(); next.Sub(agentapitest.T0) != 35*time.Second {
		t.Fatalf("the next heartbeat is due at +%s, want +35s", next.Sub(agentapitest.T0))
	}

	p.mu.Lock()
	p.down = false
	seen := p.pollsSeen
	p.mu.Unlock()
	p.clk.Advance(4 * time.Second) // the heartbeat finds the control plane back
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll was not asked again when the heartbeat found the control plane back")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if got := p.polledAt[0].Sub(agentapitest.T0); got != 35*time.Second {
		t.Fatalf("the long poll came back at +%s, want +35s, with the heartbeat", got)
	}
}

// A control plane that answers a long poll 503 with a Retry-After is asked
// again no sooner, whatever its heartbeats say: it asked for the time.
func TestHeartbeatsDoNotCutARetryAfterShort(t *testing.T) {
	r := newRig(t)
	clk := clock.NewVirtual(agentapitest.T0)
	again := make(chan struct{}) // closed at the second long poll
	polls := r.startBP1AgainstPolls(clk, func(n int, w http.ResponseWriter, req *http.Request) {
		if n == 1 {
			answerUnavailable(w, "20", "busy")
			return
		}
		if n == 2 {
			close(again)
		}
		<-req.Context().Done()
	})

	// Heartbeats are answered at 0, 5, 10 and 15 s.
	for parkedOr(clk, 2, again) { // the heartbeat's interval and the long poll's wait
		next, _ := clk.Next()
		clk.AdvanceTo(next)
	}
	if got := polls.list(); len(got) != 2 || got[1] != 20*time.Second {
		t.Fatalf("long polls at %v, want at 0s and 20s", got)
	}
}

// startBP1On starts the agent of instance bp-1 on clk against a control
// plane served by h.
func (r *rig) startBP1On(clk *clock.Virtual, h http.Handler) {
	srv := httptest.NewServer(h)
	r.t.Cleanup(srv.Close)
	cfg := r.config("bp-1", "secret")
	cfg.URL = srv.URL
	r.start(cfg, clk, srv.Client())
}

// startBP1AgainstPolls starts the agent of instance bp-1 on clk against a
// control plane that welcomes it, accepts its heartbeats and signals, and
// answers its nth long poll with answerPoll. It returns the times the long
// polls came.
func (r *rig) startBP1AgainstPolls(clk *clock.Virtual, answerPoll func(n int, w http.ResponseWriter, req *http.Request)) *pollTimes {
	polls := &pollTimes{clk: clk}
	r.startBP1On(clk, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case agentapi.PathHello:
			welcomeBP1(w)
		case agentapi.PathNext:
			answerPoll(polls.note(), w, req)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	return polls
}

// pollTimes are the virtual times, since T0, at which long polls came.
type pollTimes struct {
	clk *clock.Virtual
	mu  sync.Mutex
	at  []time.Duration
}

// note records a long poll coming now and returns how many have come.
func (p *pollTimes) note() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = append(p.at, p.clk.Now().Sub(agentapitest.T0))
	return len(p.at)
}

func (p *pollTimes) list() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.at)
}

// welcomeBP1 answers a hello as the control plane does, telling the agent
// it is instance bp-1 and its token is "tok".
func welcomeBP1(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(agentapi.HelloResponse{Token: "tok", InstanceID: "bp-1", HeartbeatSeconds: 5})
}

// answerUnavailable answers as a control plane that is up but cannot serve
// the call now, asking to be called again in retryAfter seconds.
func answerUnavailable(w http.ResponseWriter, retryAfter, why string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", retryAfter)
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(agentapi.ErrorResponse{Error: why, Code: agentapi.CodeUnavailable})
}

// parkedOr waits until the agent parks on n timers of clk, and reports
// false if ch is closed first.
func parkedOr(clk *clock.Virtual, n int, ch <-chan struct{}) bool {
	parked := make(chan struct{})
	go func() {
		clk.BlockUntil(n)
		close(parked)
	}()
	select {
	case <-parked:
		return true
	case <-ch:
		for range n {
			clk.AfterFunc(time.Hour, func() {}) // releases the BlockUntil above
		}
		return false
	}
}

// A control plane that answers a long poll itself with 503 (its store
// throttled) is reachable: its answered heartbeats say nothing new, and the
// long poll backs off as far as the backoff grows, Retry-After its floor,
// rather than coming again with every heartbeat.
func TestHeartbeatsDoNotCutTheBackoffOfAnAnsweredFailure(t *testing.T) {
	r := newRig(t)
	clk := clock.NewVirtual(agentapitest.T0)
	polls := r.startBP1AgainstPolls(clk, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerUnavailable(w, "2", "throttled")
	})

	// Heartbeats are answered every 5 s throughout.
	for clk.Now().Sub(agentapitest.T0) < 70*time.Second {
		clk.BlockUntil(2) // the heartbeat's interval and the long poll's backoff
		next, _ := clk.Next()
		clk.AdvanceTo(next)
	}
	clk.BlockUntil(2)
	// Waits of 2 (Retry-After over 1 s), 2, 4, 8, 16, 30 and 30 s.
	want := []time.Duration{0, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 62 * time.Second}
	if got := polls.list(); !slices.Equal(got, want) {
		t.Fatalf("long polls at %v, want at %v", got, want)
	}
}
