package appplatform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/digitalocean/godo"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// Errors callers branch on with errors.Is.
var (
	// ErrUnauthorized: DigitalOcean refused DO_API_TOKEN (401, or 403 for a
	// token without write access to apps).
	ErrUnauthorized = errors.New("DigitalOcean rejected the API token")
	// ErrAppNotFound: no app APP_ID is visible to the token (404).
	ErrAppNotFound = errors.New("app not found")
	// ErrWorkerNotFound: the app's spec has no worker named WORKER_NAME.
	ErrWorkerNotFound = errors.New("worker not found in the app spec")
	// ErrWorkerAutoscaled: the worker uses App Platform's own autoscaling,
	// which ignores instance_count; two autoscalers would fight.
	ErrWorkerAutoscaled = errors.New("worker uses App Platform autoscaling")
	// ErrConflict: DigitalOcean refused an update with 409 Conflict;
	// SetWorkerCount wraps it when every attempt was refused so.
	ErrConflict = errors.New("app spec changed concurrently")

	// errDOTransient marks DigitalOcean failures that may pass by
	// themselves: 5xx answers, timeouts, network trouble.
	errDOTransient = errors.New("transient DigitalOcean error")
)

// DOError is an error answer from the DigitalOcean API. It wraps what the
// status means: ErrUnauthorized, ErrAppNotFound, domain.ErrRateLimited
// (429), ErrConflict (409) or the transient mark of a 5xx.
type DOError struct {
	Op        string // what bullpen asked, e.g. "get app 1234"
	Status    int
	Message   string    // DigitalOcean's message
	RequestID string    // for DigitalOcean support
	Reset     time.Time // with a 429: when calls are accepted again
	kind      error
}

func (e *DOError) Error() string {
	msg := fmt.Sprintf("%s: DigitalOcean answered %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		msg += ": " + truncate(e.Message)
	}
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	if !e.Reset.IsZero() {
		msg += ", rate limited until " + e.Reset.UTC().Format(time.RFC3339)
	}
	return msg
}

func (e *DOError) Unwrap() error { return e.kind }

// classifyDO turns what godo returned into this package's errors. Only the
// operation, the status and DigitalOcean's message are kept: never a
// request header, so never the token.
func classifyDO(op string, err error, now time.Time) error {
	if err == nil {
		return nil
	}
	var answer *godo.ErrorResponse
	if errors.As(err, &answer) && answer.Response != nil {
		return doAnswerError(op, answer, now)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, context.DeadlineExceeded) {
		// A url.Error names the request URL: the API's, with the app id
		// and no credentials.
		return fmt.Errorf("%s: %w: %w", op, errDOTransient, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func doAnswerError(op string, answer *godo.ErrorResponse, now time.Time) error {
	status := answer.Response.StatusCode
	e := &DOError{Op: op, Status: status, Message: answer.Message, RequestID: answer.RequestID}
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		e.kind = ErrUnauthorized
	case status == http.StatusNotFound:
		e.kind = ErrAppNotFound
	case status == http.StatusConflict:
		e.kind = ErrConflict
	case status == http.StatusTooManyRequests:
		e.kind = domain.ErrRateLimited
		e.Reset = now.Add(time.Minute)
		if reset := rateReset(answer.Response, now); reset.After(now) {
			e.Reset = reset
		}
	case status >= 500:
		e.kind = errDOTransient
	}
	return e
}

// rateReset is when a 429 ends: the later of DigitalOcean's RateLimit-Reset
// header (Unix seconds) and a Retry-After in seconds; zero when neither is
// there.
func rateReset(r *http.Response, now time.Time) time.Time {
	var reset time.Time
	if secs, err := strconv.ParseInt(r.Header.Get("RateLimit-Reset"), 10, 64); err == nil && secs > 0 {
		reset = time.Unix(secs, 0)
	}
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err == nil && secs >= 0 {
		if at := now.Add(time.Duration(secs) * time.Second); at.After(reset) {
			reset = at
		}
	}
	return reset
}

// IsTransient reports whether a cycle failed for a reason that may pass by
// itself (GitHub's or DigitalOcean's 5xx, timeouts, network failures, rate
// limits, a spec that kept changing under us): the cycle is skipped with a
// warning and the next one tries again. Anything else needs a human.
func IsTransient(err error) bool {
	return rest.IsTransient(err) || errors.Is(err, errDOTransient) ||
		errors.Is(err, domain.ErrRateLimited) || errors.Is(err, ErrConflict)
}

// rateLimitedUntil is when a rate-limited API accepts calls again; zero if
// err is no rate limit.
func rateLimitedUntil(err error) time.Time {
	var gh *rest.RateLimitError
	if errors.As(err, &gh) {
		return gh.Reset
	}
	var do *DOError
	if errors.As(err, &do) && errors.Is(do.kind, domain.ErrRateLimited) {
		return do.Reset
	}
	return time.Time{}
}

// truncate keeps an API's message short enough for a log line.
func truncate(s string) string {
	const limit = 300
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
