package app_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/app"
)

// One throttle guards the status API and the dashboard's sign-in: an
// address that guessed ten tokens wrong at the API is refused at the login
// form too, unchecked, with 429.
func TestTokenGuessesAreThrottledAcrossTheAPIAndTheDashboard(t *testing.T) {
	a := newApp(t, app.Options{})
	h := a.Handler()
	const guesser = "203.0.113.7:40000"
	for i := range 10 {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/pools", nil)
		req.RemoteAddr, req.Header["Authorization"] = guesser, []string{"Bearer guess-" + string(rune('a'+i))}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i+1, rec.Code)
		}
	}
	login := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {"token"}}.Encode()))
	login.RemoteAddr = guesser
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, login)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("the guesser's login: %d (Retry-After %q), want 429 unchecked", rec.Code, rec.Header().Get("Retry-After"))
	}
	other := httptest.NewRequest(http.MethodGet, "/api/v1/pools", nil)
	other.RemoteAddr, other.Header["Authorization"] = "198.51.100.2:50000", []string{"Bearer token"}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, other)
	if rec.Code != http.StatusOK {
		t.Fatalf("another address with the right token: %d, want 200", rec.Code)
	}
}
