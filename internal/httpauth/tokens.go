package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"time"
)

// Role is what a token lets its holder do.
type Role string

// The roles of bullpen's operator tokens.
const (
	// RoleAdmin holds the admin token: the status API and the dashboard.
	RoleAdmin Role = "admin"
	// RoleViewer holds the viewer token: the dashboard only, read-only.
	RoleViewer Role = "viewer"
)

// Tokens knows the admin token and the optional viewer token, as digests,
// and tells which of them a credential is. Every surface that takes either
// token asks it, so that none mistakes the other role's token for a wrong
// guess.
type Tokens struct {
	admin, viewer       [sha256.Size]byte
	hasAdmin, hasViewer bool
}

// NewTokens keeps the digests of the admin and viewer tokens; an empty one
// is not configured and matches nothing.
func NewTokens(admin, viewer string) Tokens {
	return Tokens{admin: sha256.Sum256([]byte(admin)), viewer: sha256.Sum256([]byte(viewer)),
		hasAdmin: admin != "", hasViewer: viewer != ""}
}

// HasViewer reports whether a viewer token is configured.
func (t Tokens) HasViewer() bool { return t.hasViewer }

// Role returns the role token grants. Both digests are always compared, in
// constant time: comparing digests rather than the tokens keeps neither the
// length nor the content of a guess from changing how long the answer
// takes, which subtle.ConstantTimeCompare on the tokens alone would not.
func (t Tokens) Role(token string) (Role, bool) {
	got := sha256.Sum256([]byte(token))
	isAdmin := subtle.ConstantTimeCompare(got[:], t.admin[:]) == 1 && t.hasAdmin && token != ""
	isViewer := subtle.ConstantTimeCompare(got[:], t.viewer[:]) == 1 && t.hasViewer && token != ""
	switch {
	case isAdmin:
		return RoleAdmin, true
	case isViewer:
		return RoleViewer, true
	}
	return "", false
}

// CheckToken is Check for a token offered as the admin or the viewer token:
// it returns the role token grants. Only a token that is neither counts as
// a wrong one: a viewer offering the viewer token where the admin token is
// needed is refused by the caller, for its role, not throttled for guessing.
func (l *Limiter) CheckToken(r *http.Request, surface Surface, tokens Tokens, token string) (role Role, wait time.Duration, ok bool) {
	ok, wait = l.Check(r, surface, func() bool {
		var known bool
		role, known = tokens.Role(token)
		return known
	})
	return role, wait, ok
}
