package agentapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
)

// Server is the agent API. It is an http.Handler for the paths under
// Prefix, and the domain.AssignmentNotifier that wakes long polls.
type Server struct {
	store    Store
	api      ReadingAPI
	clk      domain.Clock
	log      *slog.Logger
	metrics  *metrics
	waiters  waiters
	identity domain.IdentityVerifier // nil: no provider proof asked
	// recheckEvery > 0: RecheckLoop wakes the long polls whose instance
	// another replica changed (WithRecheck).
	recheckEvery time.Duration

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain

	// owners maps a token's hash to its instance as last read (tokenOwner).
	owners     sync.Map
	ownerCount atomic.Int64
}

var (
	_ http.Handler              = (*Server)(nil)
	_ domain.AssignmentNotifier = (*Server)(nil)
)

// ReadingAPI is the control plane's side of the agents' calls
// (agents.Service): it acts on the reading of the caller's row that
// authenticating the request has just made, so that a long poll or a
// signal reads the row once.
type ReadingAPI interface {
	domain.AgentAPI
	NextFor(ctx context.Context, in domain.Instance) (domain.Instruction, error)
	SignalFor(ctx context.Context, in domain.Instance, sig domain.Signal) error
}

// New returns the agent API over api (the control plane's side of the
// handshakes) and store (where the agents' credentials are). reg may be nil.
func New(store Store, api ReadingAPI, clk domain.Clock, log *slog.Logger, reg prometheus.Registerer, opts ...Option) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{store: store, api: api, clk: clk, log: log, metrics: newMetrics(reg),
		waiters: waiters{m: map[string]*waitEntry{}}, drained: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Option adds to the agent API what its provider offers.
type Option func(*Server)

// WithIdentity makes hello require the provider's signed proof of the
// machine (see domain.IdentityVerifier) besides its bootstrap secret.
func WithIdentity(v domain.IdentityVerifier) Option { return func(s *Server) { s.identity = v } }

// WithRecheck makes RecheckLoop look, every d, for the instances of waiting
// long polls that another replica has given a job or a release: with a
// store several replicas share, that replica's notice never reaches this
// one. It bounds how late such an agent learns of its job.
func WithRecheck(d time.Duration) Option { return func(s *Server) { s.recheckEvery = d } }

// Drain ends the long polls in progress with a 503 (the agents retry, with
// another replica or after the restart) and holds no new one, so that an
// HTTP server's Shutdown is not kept waiting by them. Register it with
// http.Server.RegisterOnShutdown.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.drained) }) }

func (s *Server) draining() bool {
	select {
	case <-s.drained:
		return true
	default:
		return false
	}
}

// Assigned wakes the long poll of the instance with that cloud id, if any.
func (s *Server) Assigned(cloudID string) { s.waiters.wake(cloudID) }

// apiError is an answer other than success, with the status and code the
// agent branches on. Its message never holds a credential.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return fail(http.StatusBadRequest, CodeBadRequest, format, args...)
}

// handler serves one endpoint: a nil body with a nil error is 204.
type handler func(w http.ResponseWriter, r *http.Request) (any, error)

type route struct {
	method   string
	endpoint string
	serve    handler
}

func (s *Server) route(path string) (route, bool) {
	switch path {
	case PathHello:
		return route{http.MethodPost, endpointHello, s.hello}, true
	case PathHeartbeat:
		return route{http.MethodPost, endpointHeartbeat, s.heartbeat}, true
	case PathNext:
		return route{http.MethodGet, endpointNext, s.next}, true
	case PathSignal:
		return route{http.MethodPost, endpointSignal, s.signal}, true
	}
	return route{}, false
}

// ServeHTTP routes, answers and counts one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	rt, ok := s.route(r.URL.Path)
	var body any
	var err error
	switch {
	case !ok:
		rt.endpoint = endpointOther
		err = fail(http.StatusNotFound, CodeNotFound, "no agent API endpoint %s", r.URL.Path)
	case r.Method != rt.method:
		w.Header().Set("Allow", rt.method)
		err = fail(http.StatusMethodNotAllowed, CodeNotFound, "%s takes %s, not %s", r.URL.Path, rt.method, r.Method)
	default:
		body, err = rt.serve(w, r)
	}
	if err == nil {
		s.metrics.requests.WithLabelValues(rt.endpoint, "ok").Inc()
		if body == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, body)
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = s.unavailable(rt.endpoint, err)
	}
	s.metrics.requests.WithLabelValues(rt.endpoint, ae.code).Inc()
	if ae.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bullpen-agent"`)
	}
	writeJSON(w, ae.status, ErrorResponse{Error: ae.msg, Code: ae.code})
}

// unavailable turns an error of the control plane (the store, a race, an
// instance whose cloud id is not recorded yet) into a 503: the agent tries
// again later.
func (s *Server) unavailable(endpoint string, err error) *apiError {
	if errors.Is(err, context.Canceled) {
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, msg: "request canceled"}
	}
	s.log.Warn("agent call not served", "endpoint", endpoint, "err", err)
	msg := "the control plane cannot serve this now; retry"
	if errors.Is(err, agents.ErrUnknownInstance) {
		msg = "the instance is not recorded yet; retry"
	}
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, msg: msg}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads exactly one JSON object of at most MaxBody bytes into v.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err == nil {
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fail(http.StatusRequestEntityTooLarge, CodeTooLarge, "request body larger than %d bytes", MaxBody)
	}
	if errors.Is(err, io.EOF) {
		return badRequest("malformed JSON: empty body")
	}
	return badRequest("malformed JSON: %v", err)
}

// missing names the required fields that are empty, or returns nil.
func missing(fields ...[2]string) error {
	var names []string
	for _, f := range fields {
		if strings.TrimSpace(f[1]) == "" {
			names = append(names, f[0])
		}
	}
	if len(names) == 0 {
		return nil
	}
	return badRequest("missing field(s): %s", strings.Join(names, ", "))
}

// ended reports whether an instance's token has expired with it.
func ended(s domain.State) bool {
	return s == domain.StateTerminating || s == domain.StateTerminated
}

// authenticate returns the instance the request's bearer token belongs to,
// read from the store. The token is the identity: nothing in the request
// can name another.
func (s *Server) authenticate(r *http.Request) (domain.Instance, error) {
	return s.authenticateWithin(r, 0)
}

// authenticateWithin is authenticate, content with a reading of the
// token's instance up to fresh old. A heartbeat uses only the instance's
// identity (id and cloud id, which never change) and comes every few
// seconds from every agent: re-reading the row each time would make
// heartbeats the store's largest load. What the window delays is only the
// refusal of a heartbeat whose instance just ended, which is harmless.
func (s *Server) authenticateWithin(r *http.Request, fresh time.Duration) (domain.Instance, error) {
	token, ok := httpauth.Bearer(r.Header.Get("Authorization"))
	if !ok {
		return domain.Instance{}, fail(http.StatusUnauthorized, CodeUnauthorized, "missing token (Authorization: Bearer TOKEN)")
	}
	hash := domain.HashSecret(token)
	in, err := s.tokenOwner(r.Context(), token, hash, fresh)
	if err != nil {
		return domain.Instance{}, err
	}
	if ended(in.State) {
		s.owners.Delete(hash)
		return domain.Instance{}, fail(http.StatusUnauthorized, CodeInstanceEnded, "token expired with its instance")
	}
	return in, nil
}

// An agent token is "<instance id>.<secret>", and its row holds the hash of
// the whole of it. Naming the row lets the token be checked on a read of
// the row by its key, which every store answers with what was last
// written: a search by the hash goes through an index, and DynamoDB's
// indexes trail the table, so a token just issued could be refused as
// unknown on the agent's first call, a refusal the agent takes as final.
const tokenSeparator = "."

// maxTokenInstanceID bounds the instance id a token may name, so that a
// malformed token is refused without asking the store about it.
const maxTokenInstanceID = 256

// issueToken returns the token of instance id with that secret.
func issueToken(id, secret string) string { return id + tokenSeparator + secret }

// tokenInstance returns the instance id a token names, and whether it
// names one. Tokens issued before they named their instance are a bare
// secret (64 hex digits, no separator); they name none.
func tokenInstance(token string) (id string, named bool) {
	i := strings.LastIndex(token, tokenSeparator)
	if i < 0 {
		return "", false
	}
	return token[:i], true
}

// wellFormed reports whether a token naming an instance has the form
// issueToken gives it, so that no other is taken to the store.
func wellFormed(token, id string) bool {
	return id != "" && len(id) <= maxTokenInstanceID && domain.ValidSecret(token[len(id)+len(tokenSeparator):])
}

// maxOwners bounds the token cache; past it, the cache starts over.
const maxOwners = 100_000

// HeartbeatAuthFresh is how old a reading of a token's instance a
// heartbeat is authenticated with (authenticateWithin). An idle machine's
// heartbeats were most of a fleet's reads at 15 s; an instance that ends
// meanwhile is told so by its agent's next long poll, which reads afresh.
const HeartbeatAuthFresh = time.Minute

// owner is a token's instance as last read.
type owner struct {
	in      domain.Instance
	checked time.Time
}

var errUnknownToken = fail(http.StatusUnauthorized, CodeUnauthorized, "unknown token")

// tokenOwner returns the instance holding token, whose hash is hash. A
// token never moves to another instance, so its instance is remembered and
// read again by id (unless its last reading is within fresh); the row read
// must still hold the token's hash. A token naming its instance is read by
// that id from the start.
func (s *Server) tokenOwner(ctx context.Context, token, hash string, fresh time.Duration) (domain.Instance, error) {
	now := s.clk.Now()
	id, named := tokenInstance(token)
	if named && !wellFormed(token, id) {
		return domain.Instance{}, errUnknownToken
	}
	if v, ok := s.owners.Load(hash); ok {
		o := v.(owner)
		if now.Sub(o.checked) < fresh {
			return o.in, nil
		}
		id = o.in.ID
	}
	if id != "" {
		in, err := s.store.GetInstance(ctx, id)
		if err == nil && sameHash(in.AgentTokenHash, hash) {
			s.remember(hash, owner{in: in, checked: now})
			return in, nil
		}
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return domain.Instance{}, fmt.Errorf("authenticate agent: %w", err)
		}
		s.owners.Delete(hash)
		if named {
			return domain.Instance{}, errUnknownToken
		}
	}
	// A bare token was issued before tokens named their instance: it is
	// found through the store's index of token hashes, accepted until the
	// machines that hold one have ended, and then read by id as above.
	rows, err := s.store.ListInstances(ctx, domain.InstanceFilter{TokenHash: hash})
	if err != nil {
		return domain.Instance{}, fmt.Errorf("authenticate agent: %w", err)
	}
	if len(rows) != 1 {
		return domain.Instance{}, errUnknownToken
	}
	s.remember(hash, owner{in: rows[0], checked: now})
	return rows[0], nil
}

// remember keeps o as the instance of the token whose hash is hash.
func (s *Server) remember(hash string, o owner) {
	if _, known := s.owners.Load(hash); !known && s.ownerCount.Add(1) > maxOwners {
		s.owners.Clear()
		s.ownerCount.Store(1)
	}
	s.owners.Store(hash, o)
}

// hashMatches compares a stored hash with the hash of a presented secret in
// constant time; an empty stored hash matches nothing.
func hashMatches(stored, secret string) bool {
	return sameHash(stored, domain.HashSecret(secret))
}

// sameHash compares a stored hash with another in constant time; an empty
// stored hash matches nothing.
func sameHash(stored, hash string) bool {
	return stored != "" && subtle.ConstantTimeCompare([]byte(stored), []byte(hash)) == 1
}
