package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
)

// Roles a session can have. Both only read today; an action added later
// must check for roleAdmin (and bring CSRF protection).
const (
	roleAdmin  = string(httpauth.RoleAdmin)
	roleViewer = string(httpauth.RoleViewer)
)

// sessionCookie names the login cookie. Its value is a signed session, never
// a token: version, role, expiry and a random id, with an HMAC under a key
// derived from the tokens, so rotating either token ends every session.
const sessionCookie = "bullpen_session"

const (
	sessionVersion = 1
	nonceLen       = 16
	payloadLen     = 1 + 1 + 8 + nonceLen
	macLen         = sha256.Size
)

type auth struct {
	tokens  httpauth.Tokens
	key     []byte
	ttl     time.Duration
	clock   domain.Clock
	limiter *httpauth.Limiter // nil: none
}

func newAuth(admin, viewer string, ttl time.Duration, clk domain.Clock) *auth {
	mac := hmac.New(sha256.New, []byte(admin))
	mac.Write([]byte("bullpen dashboard sessions\x00" + viewer))
	return &auth{tokens: httpauth.NewTokens(admin, viewer), key: mac.Sum(nil), ttl: ttl, clock: clk}
}

// hasViewer says whether a viewer token is configured.
func (a *auth) hasViewer() bool { return a.tokens.HasViewer() }

// issue returns a session for role, valid for the TTL.
func (a *auth) issue(role string) (value string, expires time.Time) {
	expires = a.clock.Now().Add(a.ttl).Truncate(time.Second)
	p := make([]byte, payloadLen, payloadLen+macLen)
	p[0] = sessionVersion
	p[1] = role[0]
	binary.BigEndian.PutUint64(p[2:10], uint64(expires.Unix()))
	if _, err := rand.Read(p[10:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(a.sign(p)), expires
}

func (a *auth) sign(payload []byte) []byte {
	mac := hmac.New(sha256.New, a.key)
	mac.Write(payload)
	return mac.Sum(payload)
}

// verify returns the role of a session that is well formed, signed with
// this key and not expired.
func (a *auth) verify(value string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) != payloadLen+macLen || b[0] != sessionVersion {
		return "", false
	}
	if !hmac.Equal(a.sign(b[:payloadLen:payloadLen]), b) {
		return "", false
	}
	expires := time.Unix(int64(binary.BigEndian.Uint64(b[2:10])), 0)
	if !a.clock.Now().Before(expires) {
		return "", false
	}
	switch b[1] {
	case roleAdmin[0]:
		return roleAdmin, true
	case roleViewer[0]:
		return roleViewer, true
	}
	return "", false
}

// check returns the role token grants, offered by r on surface, unless r's
// address offered too many wrong tokens lately: then the token is not
// looked at, and wait is how long the address must wait.
func (a *auth) check(r *http.Request, surface httpauth.Surface, token string) (role string, wait time.Duration, ok bool) {
	granted, wait, ok := a.limiter.CheckToken(r, surface, a.tokens, token)
	return string(granted), wait, ok
}

// requestRole authenticates a request by its session cookie or, for
// scripts and tools, an Authorization: Bearer token. Only the token is
// throttled: a session is signed with a 256-bit MAC, and guessing one is
// hopeless.
func (a *auth) requestRole(r *http.Request) (role string, wait time.Duration, ok bool) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if role, ok := a.verify(c.Value); ok {
			return role, 0, true
		}
	}
	if token, offered := httpauth.Bearer(r.Header.Get("Authorization")); offered {
		return a.check(r, httpauth.SurfaceDashboardBearer, token)
	}
	return "", 0, false
}

// cookie is the session cookie: HttpOnly, SameSite=Strict, and Secure when
// the browser reached us over TLS (directly or through a proxy that says
// so: Secure only narrows where the cookie goes).
// An empty value deletes the cookie.
func cookie(r *http.Request, value string, expires time.Time, ttl time.Duration) *http.Cookie {
	c := &http.Cookie{Name: sessionCookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")}
	if value == "" {
		c.MaxAge = -1
		return c
	}
	c.Expires, c.MaxAge = expires.UTC(), max(int(ttl.Seconds()), 1)
	return c
}

// localPath returns next when it is a path of this site, else "/": the
// login form must not redirect elsewhere.
func localPath(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.HasPrefix(next, "/\\") || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return u.RequestURI()
}
