// Package webhook receives GitHub webhook deliveries at POST /webhook. It
// verifies each one, keeps the workflow_job deliveries bullpen acts on in the
// inbox queue and answers at once; the intake worker processes the inbox
// asynchronously with DecodeDelivery and ParseWorkflowJob.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Headers GitHub sets on every delivery.
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
)

// Events the handler knows.
const (
	EventPing        = "ping"
	EventWorkflowJob = "workflow_job"
)

const (
	// sendTimeout bounds the inbox write so that GitHub (which gives up
	// after 10 s) gets an answer even when the queue is stuck.
	sendTimeout = 5 * time.Second
	// retryAfter is advice to whoever redelivers after a 503: GitHub does
	// not retry by itself, an operator or a redelivery job does.
	retryAfter = "10"
	// maxDeliveryID bounds the dedup id; GitHub's are 36-character GUIDs.
	maxDeliveryID = 128
)

// Handler is the http.Handler for POST /webhook. It is safe for concurrent use.
type Handler struct {
	secret  []byte
	queue   domain.Queue
	clock   domain.Clock
	log     *slog.Logger
	metrics *metrics
	opts    Options
	// slots holds a token per body being read: until its signature is
	// checked, a request is anyone's, and what it may cost is bounded here.
	slots chan struct{}
}

// New returns a handler that verifies deliveries with secret (the webhook
// secret configured on GitHub) and persists accepted ones to
// domain.QueueInbox, within the limits of opts (its zero fields take the
// defaults). Metrics are registered with reg when it is not nil.
func New(secret string, queue domain.Queue, clk domain.Clock, log *slog.Logger, reg prometheus.Registerer, opts Options) (*Handler, error) {
	switch {
	case secret == "":
		return nil, errors.New("webhook: a secret is required")
	case queue == nil || clk == nil:
		return nil, errors.New("webhook: a queue and a clock are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	return &Handler{secret: []byte(secret), queue: queue, clock: clk, log: log, metrics: m,
		opts: opts, slots: make(chan struct{}, opts.Readers)}, nil
}

// response is the handler's decision about one request.
type response struct {
	status  int
	outcome string
	body    any
	header  map[string]string
	reason  string      // why it was refused, for the log
	attrs   []slog.Attr // ids of what was accepted, for the log
}

func refuse(status int, outcome, reason string) response {
	return response{status: status, outcome: outcome, reason: reason, body: map[string]string{"error": reason}}
}

// ServeHTTP answers one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	res := h.handle(r, start)
	for k, v := range res.header {
		w.Header().Set(k, v)
	}
	writeJSON(w, res.status, res.body)
	h.record(r, res, h.clock.Now().Sub(start))
}

func (h *Handler) handle(r *http.Request, now time.Time) response {
	if r.Method != http.MethodPost {
		res := refuse(http.StatusMethodNotAllowed, OutcomeBadRequest, "method not allowed")
		res.header = map[string]string{"Allow": http.MethodPost}
		return res
	}
	sig := r.Header.Get(HeaderSignature)
	if sig == "" {
		return refuse(http.StatusUnauthorized, OutcomeUnauthorized, "missing "+HeaderSignature)
	}
	want, ok := parseSignature(sig)
	if !ok {
		return refuse(http.StatusUnauthorized, OutcomeUnauthorized, "malformed "+HeaderSignature)
	}
	event := r.Header.Get(HeaderEvent)
	b, res, ok := h.readSigned(r, want, keepFor(event))
	if !ok {
		return res
	}
	// Nothing from the request is trusted, parsed or echoed before this.
	if formEncoded(r) {
		// GitHub offers this content type for a webhook; its ping would
		// pass and every job fail, so the ping fails too.
		return refuse(http.StatusUnsupportedMediaType, OutcomeBadRequest,
			"this webhook sends application/x-www-form-urlencoded: set its content type to application/json in GitHub's webhook settings")
	}
	switch event {
	case "":
		return refuse(http.StatusBadRequest, OutcomeBadRequest, "missing "+HeaderEvent)
	case EventPing:
		return response{status: http.StatusOK, outcome: OutcomeIgnored, body: map[string]bool{"ok": true}}
	case EventWorkflowJob:
		if !b.complete() {
			return refuse(http.StatusRequestEntityTooLarge, OutcomeTooLarge,
				fmt.Sprintf("a %s payload may not exceed %d bytes", EventWorkflowJob, MaxPayload))
		}
		return h.workflowJob(r, b.kept, now)
	case EventPush:
		return h.push(b)
	default:
		return response{status: http.StatusAccepted, outcome: OutcomeIgnored, body: map[string]string{"ignored": event}}
	}
}

// formEncoded reports whether the body is a form (payload=…) rather than
// the JSON bullpen reads.
func formEncoded(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// parseSignature decodes "sha256=<64 hex digits>".
func parseSignature(v string) ([]byte, bool) {
	digits, ok := strings.CutPrefix(v, "sha256=")
	if !ok || len(digits) != 2*sha256.Size {
		return nil, false
	}
	sum, err := hex.DecodeString(digits)
	return sum, err == nil
}

// readSigned reads the body in one of the handler's read slots, hashing
// all of it and keeping its first keep bytes, and checks its signature.
func (h *Handler) readSigned(r *http.Request, want []byte, keep int) (body, response, bool) {
	tooLarge := refuse(http.StatusRequestEntityTooLarge, OutcomeTooLarge, fmt.Sprintf("body exceeds %d bytes", MaxBody))
	if r.ContentLength > MaxBody {
		return body{}, tooLarge, false
	}
	if !h.acquire(r.Context()) {
		res := refuse(http.StatusServiceUnavailable, OutcomeBusy, "too many deliveries being read, redeliver later")
		res.header = map[string]string{"Retry-After": retryAfter}
		return body{}, res, false
	}
	mac := hmac.New(sha256.New, h.secret)
	b, err := func() (body, error) {
		defer h.release() // even if a body's reader panics
		return readBody(r.Body, r.ContentLength, mac, keep)
	}()
	switch {
	case errors.Is(err, errTooLarge):
		return body{}, tooLarge, false
	case err != nil:
		return body{}, refuse(http.StatusBadRequest, OutcomeBadRequest, "cannot read the body"), false
	case !hmac.Equal(mac.Sum(nil), want):
		return body{}, refuse(http.StatusUnauthorized, OutcomeUnauthorized, "signature does not match"), false
	}
	return b, response{}, true
}

func (h *Handler) workflowJob(r *http.Request, body []byte, now time.Time) response {
	id := r.Header.Get(HeaderDelivery)
	if id == "" {
		return refuse(http.StatusBadRequest, OutcomeBadRequest, "missing "+HeaderDelivery)
	}
	if !validDeliveryID(id) {
		return refuse(http.StatusBadRequest, OutcomeBadRequest, "invalid "+HeaderDelivery)
	}
	ev, err := ParseWorkflowJob(body)
	if errors.Is(err, ErrUnhandledAction) {
		return response{status: http.StatusAccepted, outcome: OutcomeIgnored,
			body: map[string]string{"ignored": EventWorkflowJob, "action": ev.Action}}
	}
	if err != nil {
		return refuse(http.StatusBadRequest, OutcomeBadRequest, err.Error())
	}
	env, err := inboxMessage(id, now, ev)
	if err != nil {
		return refuse(http.StatusRequestEntityTooLarge, OutcomeTooLarge, err.Error())
	}
	// A sender that hangs up after the whole body was read still gets its
	// delivery kept: the write is not tied to the connection.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), sendTimeout)
	defer cancel()
	if err := h.queue.Send(ctx, domain.QueueInbox, []domain.SendRequest{{Body: env, DedupID: id}}); err != nil {
		res := refuse(http.StatusServiceUnavailable, OutcomeUnavailable, "delivery not stored, redeliver later")
		res.reason = fmt.Sprintf("persist delivery: %v", err)
		res.header = map[string]string{"Retry-After": retryAfter}
		return res
	}
	return response{
		status: http.StatusAccepted, outcome: OutcomeAccepted, body: map[string]string{"accepted": id},
		attrs: []slog.Attr{
			slog.String("action", ev.Action), slog.Int64("job_id", ev.Job.ID),
			slog.Int64("run_id", ev.Job.RunID), slog.String("repo", ev.Repo),
		},
	}
}

// validDeliveryID keeps the dedup id short and printable.
func validDeliveryID(id string) bool {
	if len(id) > maxDeliveryID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		// The bodies are maps of strings and bools; this cannot happen.
		b = []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// record counts and logs a delivery. Only ids and headers that carry no
// secret are logged, shortened: they come from an unauthenticated request.
func (h *Handler) record(r *http.Request, res response, took time.Duration) {
	event := r.Header.Get(HeaderEvent)
	h.metrics.deliveries.WithLabelValues(eventLabel(event), res.outcome).Inc()
	h.metrics.seconds.WithLabelValues(res.outcome).Observe(took.Seconds())

	attrs := append([]slog.Attr{
		slog.String("delivery", clip(r.Header.Get(HeaderDelivery))),
		slog.String("event", clip(event)),
		slog.Int("status", res.status),
		slog.String("outcome", res.outcome),
	}, res.attrs...)
	level, msg := slog.LevelDebug, "webhook delivery "+res.outcome
	if res.reason != "" {
		level, msg = slog.LevelWarn, "webhook delivery refused"
		attrs = append(attrs, slog.String("reason", res.reason), slog.String("remote", r.RemoteAddr))
	}
	h.log.LogAttrs(r.Context(), level, msg, attrs...)
}

func clip(s string) string {
	const n = 64
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
