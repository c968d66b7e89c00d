package httpauth

import (
	"testing"
)

// Role compares digests with crypto/subtle, constant-time by construction;
// this pins down what it accepts.
func TestTokensRole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		got, admin, viewer string
		want               Role
	}{
		{"s3cret", "s3cret", "", RoleAdmin},
		{"s3cres", "s3cret", "", ""},
		{"s3cre", "s3cret", "", ""},
		{"s3cret!", "s3cret", "", ""},
		{"", "s3cret", "", ""},
		{"", "", "", ""},
		{"anything", "", "", ""},
		{"v1ewer", "s3cret", "v1ewer", RoleViewer},
		{"s3cret", "s3cret", "v1ewer", RoleAdmin},
		{"v1ewe", "s3cret", "v1ewer", ""},
		{"", "s3cret", "v1ewer", ""},
		{"v1ewer", "", "v1ewer", RoleViewer}, // no admin token configured: the viewer's still reads
	}
	for _, c := range cases {
		tokens := NewTokens(c.admin, c.viewer)
		got, ok := tokens.Role(c.got)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("NewTokens(%q, %q).Role(%q) = %q, %v; want %q", c.admin, c.viewer, c.got, got, ok, c.want)
		}
	}
	if NewTokens("s3cret", "").HasViewer() || !NewTokens("s3cret", "v1ewer").HasViewer() {
		t.Error("HasViewer does not say whether a viewer token is configured")
	}
}

// A viewer offering its token where the admin token is needed is refused
// for its role by the caller; the limiter must not take it for a guess, or
// a viewer's script locks the admin out of every surface of its address.
func TestCheckTokenCountsOnlyUnknownTokens(t *testing.T) {
	r := newLimiterRig(t)
	tokens := NewTokens("admin-0123456789abcdef", "viewer-0123456789abcdef")
	const remote = "192.0.2.7:40000"
	for i := range 3 * DefaultFailures {
		role, wait, ok := r.l.CheckToken(from(remote), SurfaceAPI, tokens, "viewer-0123456789abcdef")
		if role != RoleViewer || wait != 0 || !ok {
			t.Fatalf("viewer token %d: role %q, wait %v, ok %v; want the viewer role, unthrottled", i+1, role, wait, ok)
		}
	}
	if got := r.refused(SurfaceAPI, reasonWrongToken); got != 0 {
		t.Errorf("the viewer token counted %v wrong tokens, want 0", got)
	}
	for range DefaultFailures {
		if role, _, ok := r.l.CheckToken(from(remote), SurfaceAPI, tokens, "viewer-0123456789abcdeX"); ok || role != "" {
			t.Fatalf("a wrong token granted %q", role)
		}
	}
	role, wait, ok := r.l.CheckToken(from(remote), SurfaceDashboardLogin, tokens, "admin-0123456789abcdef")
	if ok || role != "" || wait != DefaultWindow {
		t.Errorf("after %d unknown tokens: role %q, ok %v, wait %v; want throttled for the window", DefaultFailures, role, ok, wait)
	}
	if got := r.refused(SurfaceAPI, reasonWrongToken); got != DefaultFailures {
		t.Errorf("%v wrong tokens counted, want %d", got, DefaultFailures)
	}
}

func TestCheckTokenWithoutALimiter(t *testing.T) {
	t.Parallel()
	var l *Limiter
	tokens := NewTokens("admin-0123456789abcdef", "viewer-0123456789abcdef")
	if role, wait, ok := l.CheckToken(from("192.0.2.7:1"), SurfaceAPI, tokens, "admin-0123456789abcdef"); role != RoleAdmin || wait != 0 || !ok {
		t.Errorf("admin token: %q, %v, %v", role, wait, ok)
	}
	if role, _, ok := l.CheckToken(from("192.0.2.7:1"), SurfaceAPI, tokens, "nope"); role != "" || ok {
		t.Errorf("wrong token: %q, %v", role, ok)
	}
}
