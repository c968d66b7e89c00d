package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/promtest"
)

// withLimiter gives the dashboard a limiter on its own clock and registry.
func withLimiter(t *testing.T) func(*Options) {
	return func(o *Options) {
		l, err := httpauth.NewLimiter(httpauth.LimiterOptions{Clock: o.Clock, Log: o.Log, Registry: o.Registry})
		if err != nil {
			t.Fatal(err)
		}
		o.Limiter = l
	}
}

func fromAddr(remote string) func(*http.Request) {
	return func(req *http.Request) { req.RemoteAddr = remote }
}

func (r *rig) getFrom(remote, path, authorization string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	return r.do(req, authorization)
}

func (r *rig) refused(surface, reason string) float64 {
	r.t.Helper()
	return promtest.MustValue(r.t, r.reg, "bullpen_auth_refused_total", "surface", surface, "reason", reason)
}

const guesser, bystander = "192.0.2.7:40000", "192.0.2.8:40000"

func TestGuessingAtTheLoginFormIsThrottled(t *testing.T) {
	t.Parallel()
	r := newRig(t, withLimiter(t))
	r.seed()
	if n, err := testutil.GatherAndCount(r.reg, "bullpen_auth_refused_total"); err != nil || n != 6 {
		t.Fatalf("%d refusal series before any request (%v), want 6 at zero", n, err)
	}
	session := sessionOf(t, r.login(adminToken, "/", fromAddr(guesser)))
	for range httpauth.DefaultFailures {
		if rec := r.login("guess-000", "/", fromAddr(guesser)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d, want 401", rec.Code)
		}
	}
	rec := r.login(adminToken, "/jobs", fromAddr(guesser))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" || len(rec.Result().Cookies()) != 0 ||
		!strings.Contains(rec.Body.String(), "Too many wrong tokens from your address: try again in 60 s.") {
		t.Fatalf("the right token from a throttled address: %d, Retry-After %q, cookies %v\n%s",
			rec.Code, rec.Header().Get("Retry-After"), rec.Result().Cookies(), rec.Body)
	}
	if rec := r.getFrom(guesser, "/login", ""); rec.Code != http.StatusOK {
		t.Errorf("the login form itself, without a token: %d, want 200", rec.Code)
	}
	req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.RemoteAddr = guesser
	req.AddCookie(session)
	if rec := r.do(req, ""); rec.Code != http.StatusOK {
		t.Errorf("a session signed in before: %d, want 200 (sessions cannot be guessed, so are not throttled)", rec.Code)
	}
	if rec := r.login(adminToken, "/", fromAddr(bystander)); rec.Code != http.StatusSeeOther {
		t.Errorf("another address: %d, want 303", rec.Code)
	}
	r.clk.Advance(httpauth.DefaultWindow)
	if rec := r.login(adminToken, "/", fromAddr(guesser)); rec.Code != http.StatusSeeOther {
		t.Errorf("once the window passed: %d, want 303", rec.Code)
	}
	if got := r.refused("dashboard_login", "wrong_token"); got != float64(httpauth.DefaultFailures) {
		t.Errorf("dashboard_login wrong_token %v, want %d", got, httpauth.DefaultFailures)
	}
	if got := r.refused("dashboard_login", "throttled"); got != 1 {
		t.Errorf("dashboard_login throttled %v, want 1", got)
	}
	if got := r.logs.Lines("level=WARN", "too many wrong tokens", "remote=192.0.2.7", "surface=dashboard_login"); len(got) != 1 {
		t.Errorf("WARN lines %q, want one", got)
	}
	if strings.Contains(r.logs.String(), "guess-000") || strings.Contains(r.logs.String(), adminToken) {
		t.Errorf("a token reached the log:\n%s", r.logs)
	}
}

// Bearer tokens count against the same address as logins do: a guesser
// cannot get twice the guesses by using both.
func TestGuessingBearerTokensIsThrottledWithLogins(t *testing.T) {
	t.Parallel()
	r := newRig(t, withLimiter(t))
	r.seed()
	for i := range httpauth.DefaultFailures {
		if i%2 == 0 {
			r.login("guess-000", "/", fromAddr(guesser))
			continue
		}
		if rec := r.getFrom(guesser, "/jobs", "Bearer guess-000"); rec.Code != http.StatusSeeOther {
			t.Fatalf("wrong bearer token: %d, want 303 to the login form", rec.Code)
		}
	}
	for _, p := range []string{"/jobs", "/events", "/login"} {
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.RemoteAddr = guesser
		if p == "/events" {
			ctx, cancel := context.WithCancel(req.Context())
			cancel() // a stream let through ends at once rather than hang the test
			req = req.WithContext(ctx)
		}
		rec := r.do(req, "Bearer "+adminToken)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" ||
			strings.Contains(rec.Body.String(), "acme") {
			t.Errorf("%s with the right bearer token from a throttled address: %d, Retry-After %q",
				p, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	if rec := r.getFrom(bystander, "/jobs", "Bearer "+adminToken); rec.Code != http.StatusOK {
		t.Errorf("another address: %d, want 200", rec.Code)
	}
	if got := r.refused("dashboard_bearer", "wrong_token"); got != float64(httpauth.DefaultFailures/2) {
		t.Errorf("dashboard_bearer wrong_token %v, want %d", got, httpauth.DefaultFailures/2)
	}
	if got := r.refused("dashboard_bearer", "throttled"); got != 3 {
		t.Errorf("dashboard_bearer throttled %v, want 3", got)
	}
}

// Signing out cannot end a session that is recorded nowhere; the pages say
// so rather than promise it.
func TestSignOutSaysTheSessionOutlivesIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	session := sessionOf(t, r.login(viewerToken, "/", nil))
	req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.AddCookie(session)
	if page := r.do(req, "").Body.String(); !strings.Contains(page, "the session itself lasts until it expires") {
		t.Error("the sign-out button does not say what it leaves valid")
	}
	r.do(httptest.NewRequest(http.MethodPost, "/logout", nil), "")
	form := r.do(httptest.NewRequest(http.MethodGet, "/login", nil), "").Body.String()
	for _, want := range []string{"from this browser only: a copy of it stays valid until it expires",
		"Changing the admin or the viewer token ends every session"} {
		if !strings.Contains(form, want) {
			t.Errorf("the login page lacks %q", want)
		}
	}
	req = httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.AddCookie(session)
	if rec := r.do(req, ""); rec.Code != http.StatusOK {
		t.Errorf("the session after sign-out: %d; if sign-out now revokes it, say so on the login page", rec.Code)
	}
}
