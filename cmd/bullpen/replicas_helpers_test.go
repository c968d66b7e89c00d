package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// spread is a load balancer in front of replicas: each request goes to the
// next replica in turn, and to the one after when a replica cannot be
// reached (it died), as a health-checked balancer would. No sessions are
// sticky: an agent's long poll and its next signal may reach different
// replicas.
type spread struct {
	*httptest.Server
	mu       sync.Mutex
	backends []string
	next     int
}

func newSpread(t *testing.T) *spread {
	s := &spread{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.forward))
	t.Cleanup(s.Close)
	return s
}

func (s *spread) add(base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends = append(s.backends, base)
}

// remove takes base out of the rotation, as a balancer's health check
// does once a backend stops answering: its port may soon be another
// listener's.
func (s *spread) remove(base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends = slices.DeleteFunc(s.backends, func(b string) bool { return b == base })
}

// order is the backends to try for one request, starting at the next in
// turn.
func (s *spread) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.backends)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, s.backends[(s.next+i)%n])
	}
	s.next++
	return out
}

func (s *spread) forward(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var lastErr error
	for _, base := range s.order() {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client hung up
			}
			lastErr = err
			continue // that replica is gone: the next one answers
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	http.Error(w, fmt.Sprintf("no replica answers: %v", lastErr), http.StatusBadGateway)
}

// runnerLog is what the machines' fake runners append to: one line when a
// runner starts its job and one when it ends, with the runner's name (from
// its just-in-time config) and the time.
type runnerLog struct{ path string }

// runnerScript is a fake runner that records its start and end in log.
func (l runnerLog) script() string {
	return "#!/bin/sh\n" +
		`echo "start $(date +%s.%N) $1" >> '` + l.path + "'\n" +
		`echo "Running job: $1"` + "\n" + // what tells the agent the job started
		"sleep 0.3\n" +
		`echo "end $(date +%s.%N) $1" >> '` + l.path + "'\n"
}

// runnerSpan is one runner's run of its job.
type runnerSpan struct {
	instance   string
	job        int64
	start, end float64
}

// spans reads the log: one span per runner that started, keyed by the
// runner's name (ended false when its end is missing).
func (l runnerLog) spans(t *testing.T) map[string]*runnerSpan {
	t.Helper()
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]*runnerSpan{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		var kind, jit string
		var at float64
		if _, err := fmt.Sscan(sc.Text(), &kind, &at, &jit); err != nil {
			t.Fatalf("runner log line %q: %v", sc.Text(), err)
		}
		name, err := jitRunnerName(jit)
		if err != nil {
			t.Fatal(err)
		}
		sp := out[name]
		if sp == nil {
			inst, job, ok := domain.ParseRunnerName(name)
			if !ok {
				t.Fatalf("runner name %q names no instance and job", name)
			}
			sp = &runnerSpan{instance: inst, job: job}
			out[name] = sp
		}
		switch kind {
		case "start":
			if sp.start != 0 {
				t.Errorf("runner %s started twice", name)
			}
			sp.start = at
		case "end":
			sp.end = at
		}
	}
	return out
}

// leaseLine is a replica's log line saying it took a loop's lease, or that
// it no longer holds it (refused a renewal, or the lease ran out first).
var leaseLine = regexp.MustCompile(`time=(\S+) level=INFO msg="(took a loop's lease: it runs here|a loop's lease is no longer held here)" loop=leases lease=(\S+)`)

// leaseSpell is a time a replica held a loop's lease: from when its log
// says it took it to when it says it no longer holds it (zero: to its end).
type leaseSpell struct{ from, to time.Time }

// leaseSpells lists the spells in which a replica's log says it held
// loop's lease.
func leaseSpells(logs, loop string) []leaseSpell {
	var out []leaseSpell
	for _, line := range strings.Split(logs, "\n") {
		m := leaseLine.FindStringSubmatch(line)
		if m == nil || m[3] != loop {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		switch {
		case err != nil:
		case strings.HasPrefix(m[2], "took"):
			out = append(out, leaseSpell{from: at})
		case len(out) > 0 && out[len(out)-1].to.IsZero():
			out[len(out)-1].to = at
		}
	}
	return out
}
