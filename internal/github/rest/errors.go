package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v88/github"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// ErrUnauthorized: GitHub refused the token, or the App's key or ids (401).
var ErrUnauthorized = errors.New("GitHub rejected the credentials")

// errTransient marks failures that may pass if retried later: GitHub's 5xx
// answers, timeouts and network trouble.
var errTransient = errors.New("transient GitHub error")

// defaultRetryAfter is how long to wait after a secondary rate limit that
// names no time; GitHub's documentation asks for at least a minute.
const defaultRetryAfter = time.Minute

// IsTransient reports whether a call failed for a reason that may pass by
// itself: a 5xx answer, a timeout, a network failure, or a rate limit (see
// RateLimitError for when it ends). A poll that gets one should skip its
// cycle rather than act on partial data.
func IsTransient(err error) bool {
	return errors.Is(err, errTransient) || errors.Is(err, domain.ErrRateLimited)
}

// APIError is an error answer from GitHub. It wraps the domain error the
// status means for the call (domain.ErrNotFound, domain.ErrRunnerBusy,
// domain.ErrExists, domain.ErrInvalidRequest, ErrUnauthorized, or the
// transient mark of a 5xx), if any.
type APIError struct {
	Op      string // what bullpen asked, e.g. "delete runner 42 in acme"
	Status  int
	Message string // GitHub's message
	kind    error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: GitHub answered %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if errors.Is(e.kind, ErrUnauthorized) {
		msg += " (" + ErrUnauthorized.Error() + ")"
	}
	return msg
}

func (e *APIError) Unwrap() error { return e.kind }

// RateLimitError is a call GitHub refused under its primary or secondary
// rate limit (a 429, or a 403 with x-ratelimit-remaining: 0, retry-after
// or GitHub's secondary-limit message). It wraps domain.ErrRateLimited.
type RateLimitError struct {
	Op    string
	Reset time.Time // when to call again (RateLimited)
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%s: rate limited by GitHub until %s", e.Op, e.Reset.UTC().Format(time.RFC3339))
}

func (e *RateLimitError) Unwrap() error { return domain.ErrRateLimited }

// RetryAt is when the limit lifts (domain.RetryAt).
func (e *RateLimitError) RetryAt() time.Time { return e.Reset }

// statusErrors says what an answer's status means for one call, where it
// means more than the defaults of classify.
type statusErrors map[int]error

// classify turns what go-github returned into bullpen's errors. Nothing of
// the request's credentials is carried over: only the operation, the status
// and GitHub's message.
func (c *Client) classify(op string, err error, special statusErrors) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp := limitAnswer(err); resp != nil {
		return &RateLimitError{Op: op, Reset: retryTime(resp.Header, c.clk.Now())}
	}
	var app *ghinstallation.HTTPError
	if errors.As(err, &app) {
		return c.classifyAppError(op, app)
	}
	var answer *github.ErrorResponse
	if errors.As(err, &answer) && answer.Response != nil {
		return c.classifyAnswer(op, answer.Response, answer.Message, special)
	}
	return classifyTransport(op, err)
}

// Classify is what a Client makes of err, the failure of a go-github call
// (op) made outside one, such as a GitHub App's own calls with its JWT:
// a rate limit (*RateLimitError, when to retry on clk), ErrUnauthorized, a
// transient failure, or an *APIError. GitHub's messages are kept; no
// credential is.
func Classify(op string, err error, clk domain.Clock) error {
	if clk == nil {
		clk = clock.Real{}
	}
	return (&Client{clk: clk}).classify(op, err, nil)
}

func (c *Client) classifyAnswer(op string, resp *http.Response, message string, special statusErrors) error {
	status := resp.StatusCode
	if at, limited := RateLimited(status, resp.Header, message, c.clk.Now()); limited {
		return &RateLimitError{Op: op, Reset: at}
	}
	e := &APIError{Op: op, Status: status, Message: truncate(message)}
	switch {
	case special[status] != nil:
		e.kind = special[status]
	case status == http.StatusUnauthorized:
		e.kind = ErrUnauthorized
	case status == http.StatusNotFound, status == http.StatusGone:
		e.kind = domain.ErrNotFound
	case status >= 500:
		e.kind = errTransient
	}
	return e
}

// classifyAppError is a failure to get an installation token for the App.
func (c *Client) classifyAppError(op string, err *ghinstallation.HTTPError) error {
	resp := err.Response
	if resp == nil {
		return classifyTransport(op+": get installation token", err.RootCause)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close() // ghinstallation leaves it open on an error answer
	op += ": get installation token"
	if at, limited := RateLimited(resp.StatusCode, resp.Header, string(body), c.clk.Now()); limited {
		return &RateLimitError{Op: op, Reset: at}
	}
	e := &APIError{Op: op, Status: resp.StatusCode}
	switch {
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusNotFound:
		e.kind, e.Message = ErrUnauthorized, "check the App id, installation id and private key"
	case resp.StatusCode >= 500:
		e.kind = errTransient
	}
	return e
}

// classifyTransport is a failure without an answer. URLs in it are the
// API's own (no credentials travel in them); the text is kept.
func classifyTransport(op string, err error) error {
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", op, errTransient, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// RateLimited tells an answer refusing a call for GitHub's rate limit
// from one refusing it for want of permission — a 429, or a 403 with
// retry-after, with x-ratelimit-remaining: 0, or with GitHub's
// secondary-limit message in its body — and says when the call may go
// again, now being the time of the answer: after retry-after when the
// answer gives it; not before x-ratelimit-reset when
// x-ratelimit-remaining is 0 (the primary budget is spent); otherwise (a
// secondary limit naming no time) a minute on. x-ratelimit-reset alone is
// the primary budget's hourly renewal, not the end of a secondary limit:
// waiting for it could stop an account for an hour.
func RateLimited(status int, h http.Header, body string, now time.Time) (time.Time, bool) {
	limited := status == http.StatusTooManyRequests || status == http.StatusForbidden &&
		(h.Get("retry-after") != "" || h.Get("x-ratelimit-remaining") == "0" ||
			strings.Contains(strings.ToLower(body), "secondary rate limit"))
	if !limited {
		return time.Time{}, false
	}
	return retryTime(h, now), true
}

// limitAnswer is GitHub's answer when go-github took err for a primary
// or a secondary rate limit, else nil.
func limitAnswer(err error) *http.Response {
	var primary *github.RateLimitError
	if errors.As(err, &primary) && primary.Response != nil {
		return primary.Response
	}
	var secondary *github.AbuseRateLimitError
	if errors.As(err, &secondary) && secondary.Response != nil {
		return secondary.Response
	}
	return nil
}

// retryTime is when a call refused for a rate limit may go again
// (RateLimited).
func retryTime(h http.Header, now time.Time) time.Time {
	var at time.Time
	if secs, err := strconv.Atoi(h.Get("retry-after")); err == nil && secs >= 0 {
		at = now.Add(time.Duration(secs) * time.Second)
	}
	if h.Get("x-ratelimit-remaining") == "0" {
		if secs, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err == nil && secs > 0 {
			at = latest(at, time.Unix(secs, 0))
		}
	}
	if at.IsZero() {
		at = now.Add(defaultRetryAfter)
	}
	return at
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// truncate keeps GitHub's message short enough for a log line.
func truncate(s string) string {
	const limit = 300
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
