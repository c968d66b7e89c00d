// Package ratelimit keeps bullpen within GitHub's rate limits, per account
// (an App installation, or a token). It reads the primary budget from
// every answer's x-ratelimit-* headers and shows it on /metrics; after a
// secondary limit (403 or 429 with retry-after, or GitHub's message) it
// pauses the account's calls for the time asked, at least a minute, so
// that nothing keeps hammering GitHub; and when the budget runs low it
// refuses housekeeping calls (listing and deleting runners, listing jobs)
// locally, so that what is left goes to registering the runners of jobs
// that wait.
package ratelimit

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

const (
	// minPause is how long a secondary limit without retry-after pauses.
	minPause = time.Minute
	// reserveShare of the primary budget is kept for runner registrations.
	reserveShare = 10
)

// Metrics are the rate-limit metrics of every account.
type Metrics struct {
	remaining *prometheus.GaugeVec
	limited   *prometheus.CounterVec
	deferred  *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bullpen_github_rate_remaining",
			Help: "Calls left in the account's primary GitHub rate limit, as GitHub last said."}, []string{"account"}),
		limited: promreg.Counters("bullpen_github_rate_limited_total",
			"GitHub answers refusing a call for a rate limit; the account's calls pause.", "account"),
		deferred: promreg.Counters("bullpen_github_calls_deferred_total",
			"Calls not made: the account is paused, or its budget is kept for runner registrations.", "account", "kind"),
	}
	if err := promreg.Register(reg, "GitHub rate limit", m.remaining, m.limited, m.deferred); err != nil {
		return nil, err
	}
	return m, nil
}

// Budget is one account's rate limit as last seen.
type Budget struct {
	account string
	clock   domain.Clock
	metrics *Metrics
	log     *slog.Logger

	mu        sync.Mutex
	limit     int
	remaining int
	reset     time.Time
	paused    time.Time // no call before this
}

// NewBudget tracks account's limit; metrics may be nil. A pause is logged
// to log (nil: slog's default) when it starts.
func NewBudget(account string, clk domain.Clock, m *Metrics, log *slog.Logger) *Budget {
	if log == nil {
		log = slog.Default()
	}
	return &Budget{account: account, clock: clk, metrics: m, log: log, remaining: -1}
}

// PausedError is a call not made: the account's calls are paused after a
// rate limit, or its low budget is kept for runner registrations. It wraps
// domain.ErrRateLimited.
type PausedError struct {
	Account string
	Until   time.Time
	Reason  string
}

func (e *PausedError) Error() string {
	return fmt.Sprintf("GitHub calls for %s wait until %s: %s", e.Account, e.Until.UTC().Format(time.RFC3339), e.Reason)
}

func (e *PausedError) Unwrap() error { return domain.ErrRateLimited }

// RetryAt is when the account's calls go again (domain.RetryAt).
func (e *PausedError) RetryAt() time.Time { return e.Until }

// Transport is an http.RoundTripper over next that keeps b.
func (b *Budget) Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if err := b.admit(r); err != nil {
			return nil, err
		}
		resp, err := next.RoundTrip(r)
		if err == nil {
			b.observe(resp)
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// admit refuses a call while the account is paused, and a housekeeping
// call while the budget is low.
func (b *Budget) admit(r *http.Request) error {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case now.Before(b.paused):
		b.defer1("paused")
		return &PausedError{Account: b.account, Until: b.paused, Reason: "GitHub refused a call for its rate limit"}
	case housekeeping(r) && b.low(now):
		b.defer1("housekeeping")
		return &PausedError{Account: b.account, Until: b.reset,
			Reason: fmt.Sprintf("%d of %d calls left this hour, kept for runner registrations", b.remaining, b.limit)}
	}
	return nil
}

func (b *Budget) defer1(kind string) {
	if b.metrics != nil {
		b.metrics.deferred.WithLabelValues(b.account, kind).Inc()
	}
}

// low: the primary budget's reserve is reached and not yet renewed.
func (b *Budget) low(now time.Time) bool {
	return b.limit > 0 && b.remaining >= 0 && b.remaining <= b.limit/reserveShare && now.Before(b.reset)
}

// housekeeping calls can wait: everything but registering a runner and
// reading the configuration.
func housekeeping(r *http.Request) bool {
	p := r.URL.Path
	return !strings.HasSuffix(p, "/generate-jitconfig") && !strings.Contains(p, "/contents/") && !strings.Contains(p, "/app/installations/")
}

// observe reads the budget from an answer, and pauses after a rate limit.
func (b *Budget) observe(resp *http.Response) {
	now := b.clock.Now()
	h := resp.Header
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, err := strconv.Atoi(h.Get("x-ratelimit-limit")); err == nil {
		b.limit = v
	}
	if v, err := strconv.Atoi(h.Get("x-ratelimit-remaining")); err == nil {
		b.remaining = v
		if b.metrics != nil {
			b.metrics.remaining.WithLabelValues(b.account).Set(float64(v))
		}
	}
	if v, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err == nil {
		b.reset = time.Unix(v, 0)
	}
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	var until time.Time
	var why string
	switch {
	case h.Get("retry-after") != "":
		secs, _ := strconv.Atoi(h.Get("retry-after"))
		until, why = now.Add(max(time.Duration(secs)*time.Second, time.Second)), "GitHub asked to retry after a while (retry-after)"
	case h.Get("x-ratelimit-remaining") == "0":
		until, why = b.reset, "the primary rate limit is spent until its reset"
	case secondaryLimit(resp):
		until, why = now.Add(minPause), "a secondary rate limit"
	default:
		return // a 403 that is not a rate limit
	}
	if !now.Before(b.paused) {
		// Once per pause: the calls it defers are counted, not logged.
		b.log.Warn("GitHub rate limit reached; this account's calls wait", "account", b.account,
			"until", until.UTC().Format(time.RFC3339), "reason", why, "status", resp.StatusCode)
	}
	if until.After(b.paused) {
		b.paused = until
	}
	if b.metrics != nil {
		b.metrics.limited.WithLabelValues(b.account).Inc()
	}
}

// secondaryLimit recognises GitHub's secondary-limit message in a 403
// without headers; the body is put back for the client to read.
func secondaryLimit(resp *http.Response) bool {
	if resp.Body == nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return err == nil && bytes.Contains(bytes.ToLower(body), []byte("secondary rate limit"))
}
