// Package fakedo is a fake of the DigitalOcean App Platform API on an
// httptest server, for testing the standalone autoscaler without an
// account. It serves
//
//	GET /v2/apps/{id}
//	PUT /v2/apps/{id}   body {"spec": {...}, "update_all_source_versions": false}
//
// with bodies shaped like DigitalOcean's ({"app": {...}} with id, spec,
// created_at, updated_at, active_deployment, pending_deployment, region,
// tier_slug; field names as godo's App and Deployment types have them),
// the RateLimit-* headers on every answer, and DigitalOcean's error body
// ({"id": "not_found", "message": ..., "request_id": ...}): 401 for a
// wrong token, 404 for an unknown app, 400 for an invalid spec, 429 under
// RateLimit, and whatever FailNext injects.
//
// A spec is stored as the JSON it was given, unknown fields included, so
// a test can check that a client writes back everything it read. Every
// change of spec bumps updated_at and creates a pending deployment, which
// Deploy makes active. Other writers are simulated with Change (now),
// AfterGet (right after the client's next read) and AfterPut (right after
// its next accepted update).
package fakedo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Server is the fake API. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu        sync.Mutex
	clk       domain.Clock
	token     string
	apps      map[string]*app
	lastID    int
	lastReq   int
	fails     []*injected
	rateReset time.Time
	requests  []string
	updates   []map[string]any // specs of accepted PUTs, in order
}

type app struct {
	id        string
	spec      map[string]any
	created   time.Time
	updated   time.Time
	active    *deployment
	pending   *deployment
	deploys   int
	afterGet  []func(spec map[string]any)
	afterPut  []func(spec map[string]any)
	ownerUUID string
}

type deployment struct {
	id      string
	spec    map[string]any
	phase   string
	cause   string
	created time.Time
	updated time.Time
}

type injected struct {
	method string // "" for any
	status int
	n      int
}

// New starts a fake on 127.0.0.1 that accepts any token, reading the wall
// clock. Close it when done.
func New() *Server {
	s := &Server{clk: clock.Real{}, apps: map[string]*app{}}
	s.srv = httptest.NewServer(s.handler())
	return s
}

// URL is the API root, without a trailing slash.
func (s *Server) URL() string { return s.srv.URL }

// Close shuts the server down.
func (s *Server) Close() { s.srv.Close() }

// SetClock makes the fake date records and rate limits by clk.
func (s *Server) SetClock(clk domain.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clk = clk
}

// RequireToken makes the fake accept only "Bearer token".
func (s *Server) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// AddApp creates an app with this spec (a *godo.AppSpec, a map, or
// anything else that encodes to a spec object) and an active deployment of
// it, and returns its id. A spec that does not encode to an object is a bug
// in the test: it panics.
func (s *Server) AddApp(spec any) string {
	m := mustSpec(spec)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastID++
	now := s.clk.Now()
	a := &app{
		id:        fmt.Sprintf("%08x-7dec-4d00-a765-%012x", s.lastID, s.lastID),
		spec:      m,
		created:   now,
		updated:   now,
		ownerUUID: "b7d9a2f0-1c3e-4f5a-8b6c-0d1e2f3a4b5c",
	}
	d := a.newDeployment(m, "initial deployment", now)
	d.phase = "ACTIVE"
	a.active = d
	s.apps[a.id] = a
	return a.id
}

func mustSpec(spec any) map[string]any {
	b, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("fakedo: encode spec: %v", err))
	}
	m, err := decodeObject(b)
	if err != nil || m == nil {
		panic(fmt.Sprintf("fakedo: spec is not an object: %s", b))
	}
	return m
}

func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func clone(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	out, _ := decodeObject(b)
	return out
}

// Spec returns a copy of the app's current spec; nil for an unknown app.
func (s *Server) Spec(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[id]; a != nil {
		return clone(a.spec)
	}
	return nil
}

// WorkerCount is the instance_count of the app's worker named name; 0 when
// there is no such app or worker, 1 when the worker leaves it out.
func (s *Server) WorkerCount(id, name string) int {
	spec := s.Spec(id)
	workers, _ := spec["workers"].([]any)
	for _, w := range workers {
		m, _ := w.(map[string]any)
		if m["name"] != name {
			continue
		}
		n, ok := m["instance_count"].(json.Number)
		if !ok {
			return 1
		}
		v, _ := n.Int64()
		return int(v)
	}
	return 0
}

// Updates returns the specs of the updates accepted so far, in order.
func (s *Server) Updates() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[string]any, len(s.updates))
	for i, u := range s.updates {
		out[i] = clone(u)
	}
	return out
}

// Requests lists the requests served so far, as "METHOD /path".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Change changes the app's spec now, as another writer (a person in the
// control panel, doctl) would.
func (s *Server) Change(id string, change func(spec map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustApp(id).change(change, "another writer", s.clk.Now())
}

// AfterGet makes another writer change the spec right after the next GET
// of the app has been answered: between a client's read and its write.
func (s *Server) AfterGet(id string, change func(spec map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.mustApp(id)
	a.afterGet = append(a.afterGet, change)
}

// AfterPut makes another writer change the spec right after the next
// accepted update of the app: overriding what the client just wrote.
func (s *Server) AfterPut(id string, change func(spec map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.mustApp(id)
	a.afterPut = append(a.afterPut, change)
}

// Deploy finishes the app's pending deployment: it becomes the active one.
func (s *Server) Deploy(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.mustApp(id)
	if a.pending == nil {
		return
	}
	now := s.clk.Now()
	if a.active != nil {
		a.active.phase, a.active.updated = "SUPERSEDED", now
	}
	a.pending.phase, a.pending.updated = "ACTIVE", now
	a.active, a.pending = a.pending, nil
}

// FailNext makes the next n requests with this method ("GET", "PUT", or ""
// for any) fail with status, in DigitalOcean's error format. A 429 carries
// the rate-limit headers with a reset a minute away.
func (s *Server) FailNext(method string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = append(s.fails, &injected{method: method, status: status, n: n})
}

// RateLimit refuses every request with 429 until reset on the fake's
// clock; a zero reset lifts it.
func (s *Server) RateLimit(reset time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateReset = reset
}

func (s *Server) mustApp(id string) *app {
	a := s.apps[id]
	if a == nil {
		panic("fakedo: no app " + id)
	}
	return a
}

// change applies a change to the spec and deploys it. Called under s.mu.
func (a *app) change(f func(spec map[string]any), cause string, now time.Time) {
	spec := clone(a.spec)
	f(spec)
	a.setSpec(spec, cause, now)
}

// setSpec records a new spec; an identical one changes nothing. Called
// under s.mu.
func (a *app) setSpec(spec map[string]any, cause string, now time.Time) {
	if same(a.spec, spec) {
		return
	}
	a.spec = clone(spec)
	a.updated = now
	if a.pending != nil {
		a.pending.phase, a.pending.updated = "SUPERSEDED", now
	}
	a.pending = a.newDeployment(spec, cause, now)
}

func (a *app) newDeployment(spec map[string]any, cause string, now time.Time) *deployment {
	a.deploys++
	return &deployment{
		id:    fmt.Sprintf("%08x-de91-4000-8000-%012x", a.deploys, a.deploys),
		spec:  clone(spec),
		phase: "PENDING_DEPLOY", cause: cause, created: now, updated: now,
	}
}

func same(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
