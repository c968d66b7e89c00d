package fakegh

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// A GitHub App's side: its identity, its installations on accounts, and
// files of repositories read through the contents API.

const appSlug = "bullpen-fake"

// Routes authenticated by the App's JWT rather than a token.
const (
	routeApp              = "GET /app"
	routeInstallations    = "GET /app/installations"
	routeOrgInstallation  = "GET /orgs/{org}/installation"
	routeUserInstallation = "GET /users/{username}/installation"
	routeRepoInstallation = "GET /repos/{owner}/{repo}/installation"
)

func isAppRoute(pattern string) bool {
	switch pattern {
	case routeAccessTokens, routeApp, routeInstallations, routeOrgInstallation, routeUserInstallation, routeRepoInstallation:
		return true
	}
	return false
}

// installation is the App installed on one account ("" for the one
// RequireApp names, which may act on every account).
type installation struct {
	id        int64
	account   string
	suspended time.Time
	created   time.Time
	// selected, when set, are the only repositories (lower-case names) the
	// installation reaches: GitHub's "only select repositories".
	selected []string
}

// SelectRepositories limits installation id to these repositories of its
// account ("owner/name"), as an administrator choosing "only select
// repositories" does.
func (s *Server) SelectRepositories(id int64, repos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.auth.installations[id]; in != nil {
		in.selected = nil
		for _, r := range repos {
			_, name, _ := strings.Cut(strings.ToLower(r), "/")
			in.selected = append(in.selected, name)
		}
	}
}

// reaches reports whether in may see the repository named name (lower case).
func (in *installation) reaches(name string) bool {
	return in.selected == nil || slices.Contains(in.selected, strings.ToLower(name))
}

// AddInstallation installs the App (RequireApp) on account: tokens issued
// for id act on that account's organisation, repositories and runners
// only.
func (s *Server) AddInstallation(id int64, account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account(account)
	s.auth.installations[id] = &installation{id: id, account: strings.ToLower(account), created: s.clk.Now()}
}

// SuspendInstallation suspends an installation: GitHub issues no token for
// it, and its lookup says so.
func (s *Server) SuspendInstallation(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.auth.installations[id]; in != nil {
		in.suspended = s.clk.Now()
	}
}

// RunnerInstallation is the installation whose token registered the runner
// named name (even once it is gone); 0 when it was not an installation
// token.
func (s *Server) RunnerInstallation(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registeredBy[strings.ToLower(name)]
}

// PutFile writes a repository's file, as a push would.
func (s *Server) PutFile(repo, path, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repo(repo)
	if s.files == nil {
		s.files = map[string]string{}
	}
	s.files[strings.ToLower(repo)+"/"+path] = content
}

// requestInstallation is the installation whose token authenticates r, or
// 0 (a personal token, or no credentials required).
func (s *Server) requestInstallation(r *http.Request) int64 {
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return s.auth.issued[cred].installation
}

// outOfReach reports whether r names an account its installation token
// may not act on (GitHub answers 404 for what an installation cannot see).
func (s *Server) outOfReach(r *http.Request) bool {
	in := s.auth.installations[s.requestInstallation(r)]
	if in == nil || in.account == "" {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) < 2 || (parts[0] != "repos" && parts[0] != "orgs") {
		return false
	}
	if parts[0] == "repos" && len(parts) > 2 && !in.reaches(parts[2]) {
		return true
	}
	return strings.ToLower(parts[1]) != in.account
}

// checkAppJWT answers 401 unless r carries the App's JWT.
func (s *Server) checkAppJWT(w http.ResponseWriter, r *http.Request) bool {
	if s.auth.appKey == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return false
	}
	scheme, jwt, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return false
	}
	if msg := verifyAppJWT(jwt, s.auth.appKey, s.auth.appID, s.clk.Now()); msg != "" {
		writeError(w, http.StatusUnauthorized, msg)
		return false
	}
	return true
}

func (s *Server) handleApp(w http.ResponseWriter, r *http.Request) {
	if !s.checkAppJWT(w, r) {
		return
	}
	owner := s.account("bullpen-fake-owner")
	now := timestamp(s.clk.Now())
	writeJSON(w, http.StatusOK, map[string]any{
		"id": s.auth.appID, "slug": appSlug, "node_id": nodeID("Integration", s.auth.appID), "client_id": "Iv1.fake",
		"owner": s.userJSON(owner, "Organization"), "name": "bullpen (fake)", "description": "",
		"external_url": "https://bullpen.example.com", "html_url": htmlBase + "/apps/" + appSlug,
		"created_at": now, "updated_at": now, "permissions": appPermissions, "events": []string{"workflow_job", "push"},
		"installations_count": len(s.auth.installations),
	})
}

var appPermissions = map[string]string{"actions": "write", "administration": "write", "contents": "read", "metadata": "read",
	"organization_self_hosted_runners": "write"}

// handleInstallation finds the App's installation on an organisation, a
// user or a repository's owner.
func (s *Server) handleInstallation(w http.ResponseWriter, r *http.Request) {
	if !s.checkAppJWT(w, r) {
		return
	}
	login := cmpOr(r.PathValue("org"), r.PathValue("username"), r.PathValue("owner"))
	var found *installation
	for _, in := range s.auth.installations {
		if in.account == strings.ToLower(login) {
			found = in
		}
	}
	a := s.accounts[strings.ToLower(login)]
	if found == nil || a == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.installationJSON(found, a))
}

func (s *Server) installationJSON(in *installation, a *account) map[string]any {
	var suspended any
	var suspendedBy any
	if !in.suspended.IsZero() {
		suspended, suspendedBy = timestamp(in.suspended), s.userJSON(a, "User")
	}
	return map[string]any{
		"id": in.id, "app_id": s.auth.appID, "app_slug": appSlug, "client_id": "Iv1.fake",
		"target_id": a.id, "target_type": "Organization", "account": s.userJSON(a, "Organization"),
		"single_file_name": nil, "has_multiple_single_files": false, "single_file_paths": []string{},
		"repository_selection": selection(in),
		"access_tokens_url":    fmt.Sprintf("%s/app/installations/%d/access_tokens", s.srv.URL, in.id),
		"html_url":             fmt.Sprintf("%s/organizations/%s/settings/installations/%d", htmlBase, a.login, in.id),
		"repositories_url":     s.srv.URL + "/installation/repositories",
		"events":               []string{"workflow_job", "push"}, "permissions": appPermissions,
		"created_at": timestamp(in.created), "updated_at": timestamp(in.created),
		"suspended_at": suspended, "suspended_by": suspendedBy,
	}
}

// handleFile serves a repository file raw (Accept
// application/vnd.github.raw+json), with an ETag; If-None-Match matching
// it is a 304.
func (s *Server) handleFile(w http.ResponseWriter, r *http.Request) {
	rp := s.repoOf(r)
	content, ok := s.files[strings.ToLower(r.PathValue("owner")+"/"+r.PathValue("repo"))+"/"+r.PathValue("path")]
	if rp == nil || !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "raw") {
		writeError(w, http.StatusUnsupportedMediaType, "the fake serves files raw only (Accept: application/vnd.github.raw+json)")
		return
	}
	etag := fmt.Sprintf(`"%x"`, sha256.Sum256([]byte(content)))
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.github.raw+json")
	fmt.Fprint(w, content)
}

// handleUser answers who a personal token is.
func (s *Server) handleUser(w http.ResponseWriter, r *http.Request) {
	if s.requestInstallation(r) != 0 {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	writeJSON(w, http.StatusOK, s.userJSON(s.account("bullpen-bot"), "User"))
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// handleInstallations lists the App's installations (GET /app/installations).
func (s *Server) handleInstallations(w http.ResponseWriter, r *http.Request) {
	if !s.checkAppJWT(w, r) {
		return
	}
	var list []*installation
	for _, in := range s.auth.installations {
		if in.account != "" {
			list = append(list, in)
		}
	}
	slices.SortFunc(list, func(a, b *installation) int { return cmp.Compare(a.id, b.id) })
	page := pageJSON(s, w, r, list, func(in *installation) map[string]any { return s.installationJSON(in, s.account(in.account)) })
	writeJSON(w, http.StatusOK, page)
}

// handleInstallationRepos lists the repositories the requesting
// installation's token reaches (GET /installation/repositories).
func (s *Server) handleInstallationRepos(w http.ResponseWriter, r *http.Request) {
	in := s.auth.installations[s.requestInstallation(r)]
	if in == nil {
		writeError(w, http.StatusForbidden, "This endpoint requires an installation token")
		return
	}
	var listed []*repo
	for _, rp := range s.repos {
		if (in.account == "" || strings.EqualFold(rp.owner.login, in.account)) && in.reaches(rp.name) {
			listed = append(listed, rp)
		}
	}
	slices.SortFunc(listed, func(a, b *repo) int { return cmp.Compare(a.id, b.id) })
	page := pageJSON(s, w, r, listed, s.repoJSON)
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(listed), "repository_selection": selection(in), "repositories": page})
}

func selection(in *installation) string {
	if in.selected != nil {
		return "selected"
	}
	return "all"
}
