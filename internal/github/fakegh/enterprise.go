package fakegh

import (
	"net/http"
	"strconv"
	"strings"
)

// Enterprises: AddEnterprise puts organisations in an enterprise, whose
// runners (registered under /enterprises/{enterprise}/actions/runners)
// serve the jobs of every repository those organisations own. As on
// GitHub, only a personal access token reaches these routes: an App's
// installation token is refused (403).

// AddEnterprise creates the enterprise slug, if new, with these
// organisations in it.
func (s *Server) AddEnterprise(slug string, orgs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := strings.ToLower(slug)
	if s.enterprises == nil {
		s.enterprises = map[string]string{}
	}
	if _, ok := s.enterprises[key]; !ok {
		s.enterprises[key] = slug
	}
	for _, org := range orgs {
		s.account(org).enterprise = key
	}
}

// AddEnterpriseRunnerGroup adds a runner group to the enterprise slug
// (created if new) and returns its id.
func (s *Server) AddEnterpriseRunnerGroup(slug, name string) int64 {
	s.AddEnterprise(slug)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addGroup(enterpriseGroupsKey(slug), name)
}

func enterpriseGroupsKey(slug string) string { return "enterprise:" + strings.ToLower(slug) }

// groupsKey is where the scope's runner groups are kept: an enterprise's
// apart from any organisation's.
func (sc scopeRef) groupsKey() string {
	if sc.enterprise != "" {
		return enterpriseGroupsKey(sc.enterprise)
	}
	return sc.owner
}

// enterpriseOf is the scope of an enterprise route, if the enterprise
// exists.
func (s *Server) enterpriseOf(slug string) (scopeRef, bool) {
	key := strings.ToLower(slug)
	if _, ok := s.enterprises[key]; !ok {
		return scopeRef{}, false
	}
	return scopeRef{enterprise: key}, true
}

// enterpriseOnly wraps an enterprise route: installation tokens are
// refused as GitHub refuses them, with 403.
func (s *Server) enterpriseOnly(h http.HandlerFunc) http.HandlerFunc {
	return s.locked(func(w http.ResponseWriter, r *http.Request) {
		if s.requestInstallation(r) != 0 {
			writeError(w, http.StatusForbidden, "Resource not accessible by integration")
			return
		}
		h(w, r)
	})
}

func (s *Server) enterpriseRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /enterprises/{enterprise}/actions/runners/generate-jitconfig": s.enterpriseOnly(s.inScope(s.handleJIT)),
		"GET /enterprises/{enterprise}/actions/runners":                     s.enterpriseOnly(s.inScope(s.handleListRunners)),
		"DELETE /enterprises/{enterprise}/actions/runners/{runner_id}":      s.enterpriseOnly(s.handleDeleteRunner),
		"GET /enterprises/{enterprise}/actions/runner-groups":               s.enterpriseOnly(s.inScope(s.handleRunnerGroups)),
	}
}

func (s *Server) enterpriseGroupJSON(slug string, g runnerGroup) map[string]any {
	base := s.srv.URL + "/enterprises/" + s.enterprises[slug] + "/actions/runner-groups/" + strconv.FormatInt(g.id, 10)
	return map[string]any{
		"id": g.id, "name": g.name, "visibility": "all", "default": g.id == DefaultRunnerGroupID,
		"runners_url":                     base + "/runners",
		"selected_organizations_url":      base + "/organizations",
		"allows_public_repositories":      false,
		"restricted_to_workflows":         false,
		"selected_workflows":              []string{},
		"workflow_restrictions_read_only": false,
	}
}
