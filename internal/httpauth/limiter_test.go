package httpauth

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

type limiterRig struct {
	t    *testing.T
	clk  *clock.Virtual
	reg  *prometheus.Registry
	logs *testlog.Buffer
	l    *Limiter
}

func newLimiterRig(t *testing.T) *limiterRig {
	t.Helper()
	r := &limiterRig{t: t, clk: clock.NewVirtual(t0), reg: prometheus.NewPedanticRegistry(), logs: &testlog.Buffer{}}
	l, err := NewLimiter(LimiterOptions{Clock: r.clk, Registry: r.reg, Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	return r
}

func from(remote string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = remote
	return req
}

// try offers a credential from remote that verify judges right when right
// is; it reports whether verify ran.
func (r *limiterRig) try(remote string, right bool) (ok bool, wait time.Duration, checked bool) {
	ok, wait = r.l.Check(from(remote), SurfaceAPI, func() bool { checked = true; return right })
	return ok, wait, checked
}

func (r *limiterRig) refused(surface Surface, reason string) float64 {
	return testutil.ToFloat64(r.l.refused.WithLabelValues(string(surface), reason))
}

func TestLimiterThrottlesAnAddressAfterTooManyWrongTokens(t *testing.T) {
	r := newLimiterRig(t)
	for i := range DefaultFailures {
		if ok, wait, checked := r.try("192.0.2.7:40000", false); ok || wait != 0 || !checked {
			t.Fatalf("guess %d: ok %v, wait %v, checked %v; want checked and refused", i+1, ok, wait, checked)
		}
		r.clk.Advance(time.Second)
	}
	until := "2026-06-01T09:01:00.000Z" // t0 + DefaultWindow, as slog writes it
	if got := r.logs.Lines("level=WARN", "remote=192.0.2.7", "until="+until); len(got) != 1 {
		t.Errorf("want one WARN saying the throttle lasts until %s, the end of the window the first failure opened:\n%s", until, r.logs)
	}
	// From another port of the same address, even with the right token.
	ok, wait, checked := r.try("192.0.2.7:40001", true)
	if ok || checked || wait != DefaultWindow-DefaultFailures*time.Second {
		t.Fatalf("after %d wrong tokens: ok %v, checked %v, wait %v; want refused unchecked for the rest of the window",
			DefaultFailures, ok, checked, wait)
	}
	if ok, _, _ := r.try("192.0.2.8:40000", true); !ok {
		t.Error("another address was throttled too")
	}
	r.clk.Advance(wait - time.Nanosecond)
	if _, _, checked := r.try("192.0.2.7:40000", true); checked {
		t.Error("checked before the window ended")
	}
	r.clk.Advance(time.Nanosecond)
	if ok, _, checked := r.try("192.0.2.7:40000", true); !ok || !checked {
		t.Error("still throttled once the window ended")
	}
}

// A right token does not wipe the slate: a viewer signing in between
// guesses at the admin token is throttled all the same.
func TestLimiterDoesNotForgetFailuresOnSuccess(t *testing.T) {
	r := newLimiterRig(t)
	for range DefaultFailures {
		r.try("192.0.2.7:1", true)
		r.try("192.0.2.7:1", false)
	}
	if _, wait, _ := r.try("192.0.2.7:1", true); wait == 0 {
		t.Fatal("not throttled after interleaving right and wrong tokens")
	}
}

func TestLimiterCountsRefusalsFromZeroAndWarnsOncePerThrottle(t *testing.T) {
	r := newLimiterRig(t)
	if n, err := testutil.GatherAndCount(r.reg, "bullpen_auth_refused_total"); err != nil || n != 6 {
		t.Fatalf("%d series at the start (%v), want 6: every surface and reason at zero", n, err)
	}
	for range 3 * DefaultFailures {
		r.try("192.0.2.7:1", false)
	}
	r.l.Check(from("192.0.2.7:1"), SurfaceDashboardLogin, func() bool { return true })
	if got := r.refused(SurfaceAPI, reasonWrongToken); got != DefaultFailures {
		t.Errorf("api wrong_token %v, want %d", got, DefaultFailures)
	}
	if got := r.refused(SurfaceAPI, reasonThrottled); got != 2*DefaultFailures {
		t.Errorf("api throttled %v, want %d", got, 2*DefaultFailures)
	}
	if got := r.refused(SurfaceDashboardLogin, reasonThrottled); got != 1 {
		t.Errorf("dashboard_login throttled %v, want 1: the address is throttled on every surface", got)
	}
	if got := r.logs.Lines("level=WARN", "too many wrong tokens", "remote=192.0.2.7", "surface=api"); len(got) != 1 {
		t.Fatalf("WARN lines %q, want one for the whole flood:\n%s", got, r.logs)
	}
	r.clk.Advance(DefaultWindow)
	for range DefaultFailures {
		r.try("192.0.2.7:1", false)
	}
	if got := r.logs.Lines("level=WARN"); len(got) != 2 {
		t.Errorf("WARN lines %q, want a second one for the second throttle", got)
	}
}

// Concurrent guesses cannot slip past the throttle before their failures
// are recorded.
func TestLimiterChecksNoMoreThanItsFailuresConcurrently(t *testing.T) {
	r := newLimiterRig(t)
	var checked atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.l.Check(from("192.0.2.7:1"), SurfaceAPI, func() bool { checked.Add(1); return false })
		}()
	}
	wg.Wait()
	if got := checked.Load(); got != DefaultFailures {
		t.Fatalf("%d guesses checked, want %d", got, DefaultFailures)
	}
}

func (r *limiterRig) tracked() int {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return len(r.l.windows)
}

func TestLimiterForgetsEndedWindowsAndBoundsItsMemory(t *testing.T) {
	r := newLimiterRig(t)
	for i := range 100 {
		r.try(fmt.Sprintf("10.0.%d.%d:1", i/256, i%256), false)
	}
	r.clk.Advance(DefaultWindow)
	r.try("192.0.2.7:1", true)
	if got := r.tracked(); got != 0 {
		t.Fatalf("%d addresses remembered a window later, want 0", got)
	}
	r.l.capacity = 300
	for i := range r.l.capacity + 10 {
		r.try(fmt.Sprintf("10.%d.%d.%d:1", i>>16, (i>>8)&255, i&255), false)
	}
	if got := r.tracked(); got != r.l.capacity {
		t.Fatalf("%d addresses remembered, want at most %d", got, r.l.capacity)
	}
	if got := r.logs.Lines("level=WARN", "too many addresses"); len(got) != 1 {
		t.Errorf("WARN lines %q, want one", got)
	}
	if got := r.refused(SurfaceAPI, reasonWrongToken); got != 100+300+10 {
		t.Errorf("wrong_token %v: refusals past the bound must still be counted", got)
	}
}

func TestClientKeyIsTheConnectionsAddress(t *testing.T) {
	spoofed := from("192.0.2.7:1")
	spoofed.Header.Set("X-Forwarded-For", "198.51.100.1")
	spoofed.Header.Set("X-Real-IP", "198.51.100.1")
	cases := map[*http.Request]string{
		spoofed:                            "192.0.2.7",
		from("[2001:db8:1:2:3:4:5:6]:443"): "2001:db8:1:2::/64",
		from("[2001:db8:1:2:ffff::1]:443"): "2001:db8:1:2::/64",
		from("[::ffff:192.0.2.9]:1"):       "192.0.2.9",
		from("[fe80::1%eth0]:1"):           "fe80::/64",
		from("not an address"):             "not an address",
		from("192.0.2.7"):                  "192.0.2.7",
	}
	for req, want := range cases {
		if got := clientKey(req); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", req.RemoteAddr, got, want)
		}
	}
}

func TestNilLimiterOnlyChecks(t *testing.T) {
	var l *Limiter
	for _, right := range []bool{true, false} {
		if ok, wait := l.Check(from("192.0.2.7:1"), SurfaceAPI, func() bool { return right }); ok != right || wait != 0 {
			t.Errorf("nil limiter, right %v: ok %v wait %v", right, ok, wait)
		}
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for wait, want := range map[time.Duration]string{
		time.Nanosecond: "1", time.Second: "1", time.Second + time.Millisecond: "2", 59 * time.Second: "59",
	} {
		rec := httptest.NewRecorder()
		RetryAfter(rec, wait)
		if got := rec.Header().Get("Retry-After"); got != want {
			t.Errorf("RetryAfter(%v) = %q, want %q", wait, got, want)
		}
	}
}
