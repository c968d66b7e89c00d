package app_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// notServed is what an address says of a path it does not serve.
const notServed = "not served on this address"

func serve(h http.Handler, method, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer token")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Split, the public address serves GitHub and the agents only, and the
// admin address the operator's surfaces only; each answers the other's
// paths with a plain 404 that is neither the dashboard's page nor a
// pointer to the other address.
func TestSplitHandlersServeEachPathOnItsOwnAddress(t *testing.T) {
	a := newApp(t, app.Options{})
	public, admin := a.Handlers(true)
	if public == nil || admin == nil {
		t.Fatalf("split handlers: public %v, admin %v", public, admin)
	}
	for _, tc := range []struct {
		method, path string
		public       bool // served on the public address, else on the admin one
	}{
		{http.MethodPost, "/webhook", true},
		{http.MethodGet, "/agent/v1/next", true},
		{http.MethodPost, "/agent/v1/hello", true},
		{http.MethodGet, "/api", false},
		{http.MethodGet, "/api/v1/pools", false},
		{http.MethodGet, "/api/v1/jobs", false},
		{http.MethodGet, "/", false},
		{http.MethodGet, "/login", false},
		{http.MethodGet, "/jobs", false},
		{http.MethodGet, "/assets/style.css", false},
		{http.MethodGet, "/metrics", false},
		{http.MethodGet, "/no/such/page", false},
	} {
		serving, other, otherName := admin, public, "public"
		if tc.public {
			serving, other, otherName = public, admin, "admin"
		}
		if rec := serve(serving, tc.method, tc.path); strings.Contains(rec.Body.String(), notServed) {
			t.Errorf("%s %s is not served where it belongs: %d %q", tc.method, tc.path, rec.Code, rec.Body)
		}
		rec := serve(other, tc.method, tc.path)
		body := rec.Body.String()
		if rec.Code != http.StatusNotFound || !strings.Contains(body, notServed) || strings.Contains(body, "<") ||
			!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("%s %s on the %s address: %d %q, want a plain 404 saying it is %s", tc.method, tc.path, otherName, rec.Code, body, notServed)
		}
		if strings.Contains(body, "admin") || strings.Contains(body, "listen") {
			t.Errorf("%s %s on the %s address tells where it is served: %q", tc.method, tc.path, otherName, body)
		}
	}
	for name, h := range map[string]http.Handler{"public": public, "admin": admin} {
		if rec := serve(h, http.MethodGet, "/healthz"); rec.Code != http.StatusOK {
			t.Errorf("GET /healthz on the %s address: %d %q", name, rec.Code, rec.Body)
		}
		if rec := serve(h, http.MethodPost, "/healthz"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("POST /healthz on the %s address: %d, Allow %q", name, rec.Code, rec.Header().Get("Allow"))
		}
	}
}

// Not split, one handler serves every path, as Handler does.
func TestUnsplitHandlersServeEverythingOnOneAddress(t *testing.T) {
	a := newApp(t, app.Options{})
	public, admin := a.Handlers(false)
	if admin != nil {
		t.Fatalf("an admin handler %v without the split", admin)
	}
	for _, path := range []string{"/metrics", "/api/v1/pools", "/assets/style.css", "/healthz"} {
		if rec := serve(public, http.MethodGet, path); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %q", path, rec.Code, rec.Body)
		}
	}
	if rec := serve(public, http.MethodGet, "/healthz"); !strings.Contains(rec.Body.String(), `"loops"`) {
		t.Errorf("GET /healthz on the one address: %q, want the full report", rec.Body)
	}
}

// failingStore is a store whose pool statuses cannot be read, with an
// error that describes the install.
type failingStore struct{ domain.Store }

const storeTrouble = "open /var/lib/bullpen/bullpen.db: disk I/O error"

func (failingStore) ListPoolStatus(context.Context) ([]domain.PoolStatus, error) {
	return nil, errors.New(storeTrouble)
}

// The public health check says up or down and nothing else: no loop's
// name, no store's error, also when the store fails. The admin one keeps
// the full report.
func TestPublicHealthSaysOnlyUpOrDown(t *testing.T) {
	a := newApp(t, app.Options{})
	runProbeLoop(t, a)
	public, admin := a.Handlers(true)
	working := a.Store
	defer func() { a.Store = working }()
	for _, tc := range []struct {
		store    domain.Store
		code     int
		want     string
		adminHas string
	}{
		{working, http.StatusOK, `{"status":"ok"}` + "\n", `"name":"probe"`},
		{failingStore{working}, http.StatusServiceUnavailable, `{"status":"unavailable"}` + "\n", storeTrouble},
	} {
		a.Store = tc.store
		rec := serve(public, http.MethodGet, "/healthz")
		if rec.Code != tc.code || rec.Body.String() != tc.want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("public /healthz: %d %q (%s), want %d %q", rec.Code, rec.Body, rec.Header().Get("Content-Type"), tc.code, tc.want)
		}
		if rec := serve(admin, http.MethodGet, "/healthz"); rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.adminHas) {
			t.Errorf("admin /healthz: %d %q, want %d with %q", rec.Code, rec.Body, tc.code, tc.adminHas)
		}
	}
}
