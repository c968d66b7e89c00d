package fakegh

import (
	"net/http"
	"strconv"
	"strings"
)

// Runner groups of organisations: every organisation has the Default group
// (DefaultRunnerGroupID); AddRunnerGroup adds others. A just-in-time runner
// of an organisation must name one of its groups (404 otherwise, as GitHub
// answers).

type runnerGroup struct {
	id   int64
	name string
}

// AddRunnerGroup adds a runner group to org and returns its id.
func (s *Server) AddRunnerGroup(org, name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account(org)
	return s.addGroup(org, name)
}

// addGroup adds a group under key (an organisation's login or an
// enterprise's groupsKey). Called under s.mu.
func (s *Server) addGroup(key, name string) int64 {
	s.lastID++
	if s.groups == nil {
		s.groups = map[string][]runnerGroup{}
	}
	key = strings.ToLower(key)
	s.groups[key] = append(s.groups[key], runnerGroup{id: s.lastID, name: name})
	return s.lastID
}

// RunnerWorkFolder is the work_folder the runner named name was registered
// with ("" for GitHub's default).
func (s *Server) RunnerWorkFolder(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workFolders[strings.ToLower(name)]
}

// RunnerGroupOf is the id of the runner group the just-in-time runner
// named name was registered in (even once it is gone); 0 when none was.
func (s *Server) RunnerGroupOf(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registeredGroups[strings.ToLower(name)]
}

// groupsOf lists org's runner groups, Default first.
func (s *Server) groupsOf(org string) []runnerGroup {
	return append([]runnerGroup{{id: DefaultRunnerGroupID, name: DefaultRunnerGroupName}}, s.groups[strings.ToLower(org)]...)
}

func (s *Server) hasGroup(org string, id int64) bool {
	for _, g := range s.groupsOf(org) {
		if g.id == id {
			return true
		}
	}
	return false
}

func (s *Server) handleRunnerGroups(w http.ResponseWriter, r *http.Request, sc scopeRef) {
	groups := s.groupsOf(sc.groupsKey())
	items := pageJSON(s, w, r, groups, func(g runnerGroup) map[string]any {
		if sc.enterprise != "" {
			return s.enterpriseGroupJSON(sc.enterprise, g)
		}
		return s.orgGroupJSON(sc.owner, g)
	})
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(groups), "runner_groups": items})
}

func (s *Server) orgGroupJSON(org string, g runnerGroup) map[string]any {
	return map[string]any{
		"id": g.id, "name": g.name, "visibility": "all", "default": g.id == DefaultRunnerGroupID,
		"runners_url":                     s.srv.URL + "/orgs/" + org + "/actions/runner-groups/" + strconv.FormatInt(g.id, 10) + "/runners",
		"inherited":                       false,
		"allows_public_repositories":      false,
		"restricted_to_workflows":         false,
		"selected_workflows":              []string{},
		"workflow_restrictions_read_only": false,
	}
}
