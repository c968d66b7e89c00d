package dashboard

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

var pagePaths = []string{"/", "/jobs", "/jobs/101", "/instances", "/config", "/instances?pool=small-x64&state=ready"}

func TestPagesSendStrangersToTheLoginForm(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	for _, p := range pagePaths {
		for name, auth := range map[string]string{"nothing": "", "wrong token": "Bearer nope", "basic": "Basic " + adminToken} {
			rec := r.do(httptest.NewRequest(http.MethodGet, p, nil), auth)
			if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/login?next="+url.QueryEscape(p) {
				t.Errorf("%s, %s: %d to %q, want 303 to the login form", p, name, rec.Code, rec.Header().Get("Location"))
			}
			if strings.Contains(rec.Body.String(), "acme") {
				t.Errorf("%s, %s: a stranger saw data", p, name)
			}
		}
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.Header.Set("X-Fragment", "1")
		if rec := r.do(req, ""); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s as a fragment: %d, want 401 (the script reloads the page)", p, rec.Code)
		}
	}
	if rec := r.do(httptest.NewRequest(http.MethodGet, "/events", nil), ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("/events without a session: %d, want 401", rec.Code)
	}
	for _, a := range []string{"/assets/style.css", "/assets/app.js", "/login"} {
		if rec := r.do(httptest.NewRequest(http.MethodGet, a, nil), ""); rec.Code != http.StatusOK {
			t.Errorf("%s: %d, want 200 without a session", a, rec.Code)
		}
	}
}

// login posts the form and returns the response.
func (r *rig) login(token, next string, edit func(*http.Request)) *httptest.ResponseRecorder {
	form := url.Values{"token": {token}, "next": {next}}
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if edit != nil {
		edit(req)
	}
	return r.do(req, "")
}

func sessionOf(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range rec.Result().Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", rec.Header())
	return nil
}

func TestLoginSetsASignedSessionCookie(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	for _, tok := range []string{"", "nope", adminToken[:len(adminToken)-1], adminToken + "x", strings.ToUpper(adminToken)} {
		rec := r.login(tok, "/jobs", nil)
		if rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 || !strings.Contains(rec.Body.String(), "neither the admin token") {
			t.Errorf("token %q: %d, cookies %v", tok, rec.Code, rec.Result().Cookies())
		}
		if tok != "" && strings.Contains(rec.Body.String(), tok) {
			t.Errorf("the refused token %q is echoed back", tok)
		}
	}
	rec := r.login(adminToken, "/jobs?pool=small-x64", nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/jobs?pool=small-x64" {
		t.Fatalf("login: %d to %q", rec.Code, rec.Header().Get("Location"))
	}
	c := sessionOf(t, rec)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP, path /", c)
	}
	if want := t0.Add(DefaultSessionTTL); !c.Expires.Equal(want) || c.MaxAge != int(DefaultSessionTTL.Seconds()) {
		t.Errorf("cookie expires %v (max-age %d), want %v", c.Expires, c.MaxAge, want)
	}
	if strings.Contains(c.Value, adminToken) || strings.Contains(c.Value, viewerToken) {
		t.Error("the cookie carries a token")
	}
	if strings.Contains(r.logs.String(), adminToken) || strings.Contains(r.logs.String(), "nope") {
		t.Errorf("a token reached the log:\n%s", r.logs)
	}
	req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.AddCookie(c)
	if got := r.do(req, ""); got.Code != http.StatusOK || !strings.Contains(got.Body.String(), `class="role" title="signed in as">admin<`) {
		t.Errorf("the session does not open the jobs page: %d", got.Code)
	}
}

// A token pasted with a space or a line break around it is the token, as
// it is in an Authorization header or a token file: it signs in, and does
// not count toward the address's wrong guesses.
func TestLoginTrimsThePastedToken(t *testing.T) {
	t.Parallel()
	r := newRig(t, withLimiter(t))
	r.seed()
	for tok, role := range map[string]string{adminToken + "\n": roleAdmin, " " + adminToken + " ": roleAdmin,
		viewerToken + "\r\n": roleViewer, "\t" + viewerToken: roleViewer} {
		rec := r.login(tok, "/jobs", fromAddr(guesser))
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/jobs" {
			t.Errorf("token %q: %d to %q, want 303 to /jobs", tok, rec.Code, rec.Header().Get("Location"))
			continue
		}
		req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
		req.AddCookie(sessionOf(t, rec))
		if got := r.do(req, ""); !strings.Contains(got.Body.String(), `class="role" title="signed in as">`+role+`<`) {
			t.Errorf("token %q: the session is not %s's (%d)", tok, role, got.Code)
		}
	}
	if got := r.refused("dashboard_login", "wrong_token"); got != 0 {
		t.Errorf("dashboard_login wrong_token %v, want 0", got)
	}
}

func TestCookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for name, edit := range map[string]func(*http.Request){
		"tls":   func(req *http.Request) { req.TLS = &tls.ConnectionState{} },
		"proxy": func(req *http.Request) { req.Header.Set("X-Forwarded-Proto", "https") },
	} {
		if c := sessionOf(t, r.login(viewerToken, "/", edit)); !c.Secure {
			t.Errorf("%s: cookie not Secure", name)
		}
	}
}

func TestSessionsExpireAndDieWithTheirKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := sessionOf(t, r.login(viewerToken, "/", nil))
	role, ok := r.d.auth.verify(c.Value)
	if !ok || role != roleViewer {
		t.Fatalf("fresh viewer session: %q %v", role, ok)
	}
	tampered := []byte(c.Value)
	tampered[3] ^= 1
	rotated := newAuth(adminToken+"-rotated", viewerToken, time.Hour, r.clk)
	cases := map[string]struct {
		value string
		a     *auth
	}{
		"tampered":            {string(tampered), r.d.auth},
		"admin token rotated": {c.Value, rotated},
		"viewer token gone":   {c.Value, newAuth(adminToken, "", time.Hour, r.clk)},
		"empty":               {"", r.d.auth},
		"not base64":          {"!!!", r.d.auth},
		"truncated":           {c.Value[:20], r.d.auth},
	}
	for name, tc := range cases {
		if _, ok := tc.a.verify(tc.value); ok {
			t.Errorf("%s: session accepted", name)
		}
	}
	r.clk.Advance(DefaultSessionTTL - time.Second)
	if _, ok := r.d.auth.verify(c.Value); !ok {
		t.Error("session refused before its expiry")
	}
	r.clk.Advance(time.Second)
	if _, ok := r.d.auth.verify(c.Value); ok {
		t.Error("session accepted at its expiry")
	}
}

func TestTokenRoles(t *testing.T) {
	t.Parallel()
	withViewer := newAuth(adminToken, viewerToken, time.Hour, nil)
	noViewer := newAuth(adminToken, "", time.Hour, nil)
	cases := []struct {
		a     *auth
		token string
		role  string
	}{
		{withViewer, adminToken, roleAdmin},
		{withViewer, viewerToken, roleViewer},
		{withViewer, "", ""},
		{withViewer, viewerToken + " ", ""},
		{noViewer, "", ""},
		{noViewer, viewerToken, ""},
		{noViewer, adminToken, roleAdmin},
	}
	for _, c := range cases {
		if role, _ := c.a.tokens.Role(c.token); string(role) != c.role {
			t.Errorf("role(%q) = %q, want %q", c.token, role, c.role)
		}
	}
}

func TestLoginRedirectsOnlyWithinTheSite(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"/jobs/7":              "/jobs/7",
		"/jobs?pool=a&x=1":     "/jobs?pool=a&x=1",
		"":                     "/",
		"//evil.example/x":     "/",
		"/\\evil.example":      "/",
		"https://evil.example": "/",
		"jobs":                 "/",
		"javascript:alert(1)":  "/",
	}
	for next, want := range cases {
		if got := localPath(next); got != want {
			t.Errorf("localPath(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestLogoutDeletesTheCookie(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := r.do(httptest.NewRequest(http.MethodPost, "/logout", nil), "")
	c := sessionOf(t, rec)
	if rec.Code != http.StatusSeeOther || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("logout: %d, cookie %+v", rec.Code, c)
	}
}

func TestResponsesForbidFramesAndForeignScripts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := r.get("/")
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", rec.Header())
	}
}
