package httpauth

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Surface names where a credential is checked, as the surface label of
// bullpen_auth_refused_total.
type Surface string

// The surfaces that check the admin and viewer tokens.
const (
	SurfaceDashboardLogin  Surface = "dashboard_login"
	SurfaceDashboardBearer Surface = "dashboard_bearer"
	SurfaceAPI             Surface = "api"
)

var surfaces = []Surface{SurfaceDashboardLogin, SurfaceDashboardBearer, SurfaceAPI}

// Why a credential was refused, as the reason label.
const (
	reasonWrongToken = "wrong_token"
	reasonThrottled  = "throttled"
)

// Defaults of LimiterOptions.
const (
	DefaultFailures = 10
	DefaultWindow   = time.Minute
)

// maxTracked bounds the addresses remembered at once (a few hundred bytes
// each). Past it, wrong tokens from addresses not yet remembered are still
// refused and counted but open no window until older ones expire: whoever
// controls that many addresses gets that many guesses per window anyway.
const maxTracked = 1 << 14

// LimiterOptions configure a Limiter. Clock is required.
type LimiterOptions struct {
	Clock domain.Clock
	Log   *slog.Logger // nil: slog.Default()
	// Registry receives bullpen_auth_refused_total; nil registers none.
	Registry prometheus.Registerer
	// Failures wrong tokens from one address within Window throttle it
	// until the window, opened by the first of them, ends.
	Failures int           // default DefaultFailures
	Window   time.Duration // default DefaultWindow
}

// Limiter slows down guessing of the admin and viewer tokens: an address
// that offered Failures wrong tokens within a window has every further
// credential refused, unchecked, until the window ends. One Limiter is
// shared by every surface that checks those tokens, so a guesser cannot
// spread guesses over them. A nil *Limiter throttles nothing and counts
// nothing.
//
// A right token does not reset the count: a viewer could otherwise sign
// in between guesses at the admin token and never be throttled.
type Limiter struct {
	clock    domain.Clock
	log      *slog.Logger
	failures int
	window   time.Duration
	refused  *prometheus.CounterVec
	capacity int // maxTracked; smaller in tests

	mu      sync.Mutex
	windows map[string]*failureWindow // by clientKey
	sweptAt time.Time
	full    bool // a window could not be opened since the last sweep
}

type failureWindow struct {
	failures int
	ends     time.Time
}

// NewLimiter returns a limiter with its counter at zero for every surface
// and reason.
func NewLimiter(o LimiterOptions) (*Limiter, error) {
	if o.Clock == nil {
		return nil, errors.New("auth limiter: no clock")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Failures <= 0 {
		o.Failures = DefaultFailures
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	l := &Limiter{clock: o.Clock, log: o.Log, failures: o.Failures, window: o.Window,
		windows: map[string]*failureWindow{}, sweptAt: o.Clock.Now(), capacity: maxTracked,
		refused: promreg.Counters("bullpen_auth_refused_total",
			"Admin or viewer tokens refused, by surface (dashboard_login, dashboard_bearer, api) and reason: "+
				"wrong_token, or throttled (the address offered too many wrong ones lately and was not checked).",
			"surface", "reason")}
	if err := promreg.Register(o.Registry, "auth", l.refused); err != nil {
		return nil, err
	}
	for _, s := range surfaces {
		l.refused.WithLabelValues(string(s), reasonWrongToken)
		l.refused.WithLabelValues(string(s), reasonThrottled)
	}
	return l, nil
}

// Check runs verify, the check of a credential r offers on surface, and
// reports whether it passed. When r's address is throttled, verify is not
// run: Check returns how long the address must wait.
//
// verify runs under the limiter's lock, so that concurrent guesses cannot
// all pass the throttle before any of their failures is recorded; it must
// be quick (the token checks compare two digests).
func (l *Limiter) Check(r *http.Request, surface Surface, verify func() bool) (ok bool, wait time.Duration) {
	if l == nil {
		return verify(), 0
	}
	key := clientKey(r)
	now := l.clock.Now()
	l.mu.Lock()
	v := l.check(key, now, verify)
	l.mu.Unlock()
	switch {
	case v.wait > 0:
		l.refused.WithLabelValues(string(surface), reasonThrottled).Inc()
	case !v.ok:
		l.refused.WithLabelValues(string(surface), reasonWrongToken).Inc()
	}
	if !v.throttledUntil.IsZero() {
		// Once per window and address, not per guess: a flood of guesses
		// must not flood the log. bullpen_auth_refused_total counts them.
		l.log.Warn("auth: too many wrong tokens from one address; its credentials are refused unchecked until the window ends",
			"remote", key, "surface", string(surface), "failures", l.failures, "until", v.throttledUntil.UTC())
	}
	if v.full {
		l.log.Warn("auth: wrong tokens from too many addresses at once; new addresses are not throttled until older ones expire",
			"addresses", l.capacity)
	}
	return v.ok, v.wait
}

// verdict is what check decided.
type verdict struct {
	ok   bool
	wait time.Duration // throttled: refused unchecked for this long
	// throttledUntil is set when this failure throttled the address, to
	// the end of its window.
	throttledUntil time.Time
	// full: the first window since the last sweep that could not be
	// opened for want of room.
	full bool
}

// check is Check under l.mu.
func (l *Limiter) check(key string, now time.Time, verify func() bool) verdict {
	l.sweep(now)
	w := l.windows[key]
	if w != nil && !now.Before(w.ends) {
		delete(l.windows, key)
		w = nil
	}
	if w != nil && w.failures >= l.failures {
		return verdict{wait: w.ends.Sub(now)}
	}
	if verify() {
		return verdict{ok: true}
	}
	if w == nil {
		if len(l.windows) >= l.capacity {
			full := !l.full
			l.full = true
			return verdict{full: full}
		}
		w = &failureWindow{ends: now.Add(l.window)}
		l.windows[key] = w
	}
	w.failures++
	if w.failures == l.failures {
		return verdict{throttledUntil: w.ends}
	}
	return verdict{}
}

// sweep forgets the windows that have ended, at most once per window, so
// the memory held is that of the addresses that failed lately.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.sweptAt) < l.window {
		return
	}
	for key, w := range l.windows {
		if !now.Before(w.ends) {
			delete(l.windows, key)
		}
	}
	l.sweptAt, l.full = now, false
}

// clientKey is the address r came from: the host of r.RemoteAddr, which
// the connection set. X-Forwarded-For and the like are deliberately not
// read: any client can send them, and trusting them would let a guesser
// claim a fresh address for every guess. Behind a reverse proxy, every
// client therefore shares the proxy's address and its throttle. An IPv6
// address counts by its /64, which one host commonly holds whole.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.String()
		}
	}
	return addr.String()
}

// RetryAfter sets the Retry-After header of a throttled answer to wait in
// whole seconds, rounded up so that a client waiting that long is let in,
// and returns them for the answer's text.
func RetryAfter(w http.ResponseWriter, wait time.Duration) int {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}
