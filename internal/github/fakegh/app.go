package fakegh

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// installationTokenTTL is how long GitHub's installation tokens live.
const installationTokenTTL = time.Hour

// auth is the credentials the fake accepts, guarded by Server.mu. With
// neither a token nor an app configured, every request is accepted.
type auth struct {
	token         string
	appID         int64
	appKey        *rsa.PublicKey
	installations map[int64]*installation
	issued        map[string]issuedToken // by installation token
	tokenRequests int
}

type issuedToken struct {
	expires      time.Time
	installation int64
}

func newAuth() auth {
	return auth{issued: map[string]issuedToken{}, installations: map[int64]*installation{}}
}

// RequireToken makes the fake accept only this token (a PAT), sent as
// "Bearer TOKEN" or "token TOKEN", besides installation tokens it issued.
func (s *Server) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth.token = token
}

// RequireApp makes the fake a GitHub App's home: POST
// /app/installations/{installationID}/access_tokens, authenticated by a JWT
// (RS256) that key verifies and whose issuer is appID, issues installation
// tokens valid for an hour, and other requests need one of them (or the
// RequireToken token).
func (s *Server) RequireApp(appID, installationID int64, key *rsa.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth.appID, s.auth.appKey = appID, key
	s.auth.installations[installationID] = &installation{id: installationID, created: s.clk.Now()}
}

// TokenRequests is how many installation tokens the fake has issued.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auth.tokenRequests
}

func (a *auth) accepts(header string, now time.Time) bool {
	if a.token == "" && a.appKey == nil {
		return true
	}
	scheme, cred, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "bearer") && !strings.EqualFold(scheme, "token") || cred == "" {
		return false
	}
	if a.token != "" && cred == a.token {
		return true
	}
	t, ok := a.issued[cred]
	return ok && now.Before(t.expires)
}

func (s *Server) handleAccessToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if s.auth.appKey == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	scheme, jwt, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	if msg := verifyAppJWT(jwt, s.auth.appKey, s.auth.appID, now); msg != "" {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	id, err := strconv.ParseInt(r.PathValue("installation_id"), 10, 64)
	in := s.auth.installations[id]
	if err != nil || in == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if !in.suspended.IsZero() {
		writeError(w, http.StatusForbidden, "This installation has been suspended")
		return
	}
	token := "ghs_" + strings.ReplaceAll(rand.Text(), "=", "")
	expires := now.Add(installationTokenTTL)
	s.auth.issued[token] = issuedToken{expires: expires, installation: id}
	s.auth.tokenRequests++
	writeJSON(w, http.StatusCreated, map[string]any{
		"token":                token,
		"expires_at":           timestamp(expires),
		"permissions":          map[string]string{"actions": "write", "administration": "write", "metadata": "read"},
		"repository_selection": "all",
	})
}

// verifyAppJWT checks a GitHub App's JWT as GitHub does: RS256 signed by the
// app's key, issued by the app, not expired. It returns GitHub's complaint,
// or "" when the token is good.
func verifyAppJWT(token string, key *rsa.PublicKey, appID int64, now time.Time) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "A JSON web token could not be decoded"
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Iat int64           `json:"iat"`
		Exp int64           `json:"exp"`
	}
	if decodeSegment(parts[0], &header) != nil || decodeSegment(parts[1], &claims) != nil {
		return "A JSON web token could not be decoded"
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || header.Alg != "RS256" {
		return "A JSON web token could not be decoded"
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) != nil {
		return "A JSON web token could not be decoded"
	}
	if iss := strings.Trim(string(claims.Iss), `"`); iss != strconv.FormatInt(appID, 10) {
		return fmt.Sprintf("Integration not found (issuer %s)", iss)
	}
	if claims.Exp <= now.Unix() {
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
	}
	// GitHub allows an App's token at most ten minutes of life, and its
	// issue time a minute of clock drift.
	if claims.Exp > now.Add(10*time.Minute+time.Minute).Unix() {
		return "'Expiration time' claim ('exp') is too far in the future"
	}
	if claims.Iat == 0 || claims.Iat > now.Add(time.Minute).Unix() {
		return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
	}
	return ""
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
