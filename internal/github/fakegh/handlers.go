package fakegh

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

const routeAccessTokens = "POST /app/installations/{installation_id}/access_tokens"

func (s *Server) routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig": s.locked(s.inScope(s.handleJIT)),
		"POST /orgs/{org}/actions/runners/generate-jitconfig":           s.locked(s.inScope(s.handleJIT)),
		"GET /repos/{owner}/{repo}/actions/runners":                     s.locked(s.inScope(s.handleListRunners)),
		"GET /orgs/{org}/actions/runners":                               s.locked(s.inScope(s.handleListRunners)),
		"DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}":      s.locked(s.handleDeleteRunner),
		"DELETE /orgs/{org}/actions/runners/{runner_id}":                s.locked(s.handleDeleteRunner),
		"GET /repos/{owner}/{repo}/actions/runs":                        s.locked(s.handleListRuns),
		"GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs":          s.locked(s.handleListJobs),
		"GET /repos/{owner}/{repo}/actions/jobs/{job_id}":               s.locked(s.handleGetJob),
		"POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel":       s.locked(s.handleCancel),
		"GET /orgs/{org}/repos":                                         s.locked(s.inScope(s.handleOrgRepos)),
		routeAccessTokens:                                               s.handleAccessToken,
		routeApp:                                                        s.locked(s.handleApp),
		routeOrgInstallation:                                            s.locked(s.handleInstallation),
		routeUserInstallation:                                           s.locked(s.handleInstallation),
		routeRepoInstallation:                                           s.locked(s.handleInstallation),
		"GET /repos/{owner}/{repo}/contents/{path...}":                  s.locked(s.handleFile),
		"GET /user": s.locked(s.handleUser),
		"POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun": s.locked(s.handleRerun),
		"GET /orgs/{org}/actions/runner-groups":                  s.locked(s.inScope(s.handleRunnerGroups)),
		routeInstallations:                                       s.locked(s.handleInstallations),
		"GET /installation/repositories":                         s.locked(s.handleInstallationRepos),
		routeRunJIT:                                              s.handleRunJIT,
		routeDoneJIT:                                             s.locked(s.handleDoneJIT),
	}
}

func (s *Server) locked(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		h(w, r)
	}
}

// inScope wraps a handler of an enterprise's, an organisation's or a
// repository's records: the scope the request names, or 404 when it does
// not exist.
func (s *Server) inScope(h func(http.ResponseWriter, *http.Request, scopeRef)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sc, ok := s.scopeOf(r)
		if !ok {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		h(w, r, sc)
	}
}

// scopeOf is the organisation or repository a request names, and whether
// it exists.
type scopeRef struct{ enterprise, owner, repo string }

func (s *Server) scopeOf(r *http.Request) (scopeRef, bool) {
	if ent := r.PathValue("enterprise"); ent != "" {
		return s.enterpriseOf(ent)
	}
	if org := r.PathValue("org"); org != "" {
		a := s.accounts[strings.ToLower(org)]
		if a == nil && s.autoCreate {
			a = s.account(org)
		}
		if a == nil {
			return scopeRef{}, false
		}
		return scopeRef{owner: a.login}, true
	}
	rp := s.repoOf(r)
	if rp == nil {
		return scopeRef{}, false
	}
	return scopeRef{owner: rp.owner.login, repo: rp.name}, true
}

func (s *Server) repoOf(r *http.Request) *repo {
	full := r.PathValue("owner") + "/" + r.PathValue("repo")
	rp := s.repos[strings.ToLower(full)]
	if rp == nil && s.autoCreate {
		rp = s.repo(full)
	}
	return rp
}

func scopeFromRef(sc scopeRef) domain.Scope {
	return domain.Scope{Enterprise: sc.enterprise, Owner: sc.owner, Repo: sc.repo}
}

func (sc scopeRef) holds(rn *runner) bool {
	return rn.enterprise == sc.enterprise && strings.EqualFold(rn.owner, sc.owner) && strings.EqualFold(rn.repo, sc.repo)
}

// runOf is the run a request names, if it is a run of the repository the
// request names.
func (s *Server) runOf(r *http.Request) *run {
	rp := s.repoOf(r)
	ru := s.runs[pathID(r, "run_id")]
	if rp == nil || ru == nil || ru.repo != rp {
		return nil
	}
	return ru
}

// jobOf is the job a request names, if it is a job of the repository the
// request names.
func (s *Server) jobOf(r *http.Request) *job {
	rp := s.repoOf(r)
	j := s.jobs[pathID(r, "job_id")]
	if rp == nil || j == nil || j.run.repo != rp {
		return nil
	}
	return j
}

func pathID(r *http.Request, name string) int64 {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil {
		return -1
	}
	return id
}

func (s *Server) handleJIT(w http.ResponseWriter, r *http.Request, sc scopeRef) {
	var body struct {
		Name          string   `json:"name"`
		RunnerGroupID int64    `json:"runner_group_id"`
		Labels        []string `json:"labels"`
		WorkFolder    string   `json:"work_folder"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if body.Name == "" || body.RunnerGroupID < 1 || len(body.Labels) == 0 || len(body.Labels) > 100 {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	if sc.repo == "" && !s.hasGroup(sc.groupsKey(), body.RunnerGroupID) {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	for _, rn := range s.runners {
		if sc.holds(rn) && strings.EqualFold(rn.name, body.Name) {
			writeError(w, http.StatusConflict, fmt.Sprintf("Already exists - A runner with the name %s already exists.", body.Name))
			return
		}
	}
	rn := s.newRunner(scopeFromRef(sc), body.Name, body.Labels)
	rn.ephemeral, rn.jit, rn.group = true, newJITConfig(body.Name, rn.id), body.RunnerGroupID
	if s.registeredBy == nil {
		s.registeredBy = map[string]int64{}
	}
	s.registeredBy[strings.ToLower(body.Name)] = s.requestInstallation(r)
	if s.workFolders == nil {
		s.workFolders = map[string]string{}
	}
	s.workFolders[strings.ToLower(body.Name)] = body.WorkFolder
	if s.registeredGroups == nil {
		s.registeredGroups = map[string]int64{}
	}
	s.registeredGroups[strings.ToLower(body.Name)] = body.RunnerGroupID
	writeJSON(w, http.StatusCreated, map[string]any{"runner": s.runnerJSON(rn), "encoded_jit_config": rn.jit})
}

// newJITConfig is opaque to clients, like GitHub's: base64 of a JSON object
// of base64 runner files, one of them holding a fresh credential.
func newJITConfig(name string, id int64) string {
	enc := base64.StdEncoding.EncodeToString
	runnerFile, _ := json.Marshal(map[string]any{"agentId": id, "agentName": name, "poolId": DefaultRunnerGroupID, "ephemeral": true})
	credentials, _ := json.Marshal(map[string]any{"scheme": "OAuthAccessToken", "data": map[string]string{"token": rand.Text() + rand.Text()}})
	files, _ := json.Marshal(map[string]string{".runner": enc(runnerFile), ".credentials": enc(credentials)})
	return enc(files)
}

func (s *Server) handleListRunners(w http.ResponseWriter, r *http.Request, sc scopeRef) {
	name := r.URL.Query().Get("name")
	var listed []*runner
	for _, rn := range byID(s.runners) {
		if sc.holds(rn) && (name == "" || rn.name == name) {
			listed = append(listed, rn)
		}
	}
	page := pageJSON(s, w, r, listed, s.runnerJSON)
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(listed), "runners": page})
}

func (s *Server) handleDeleteRunner(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scopeOf(r)
	rn := s.runners[pathID(r, "runner_id")]
	if !ok || rn == nil || !sc.holds(rn) {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if rn.busy || rn.job != nil {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Bad request - Runner %q is still running a job", rn.name))
		return
	}
	delete(s.runners, rn.id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	rp := s.repoOf(r)
	if rp == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	want := r.URL.Query().Get("status")
	from, to, ok := createdRange(r.URL.Query().Get("created"))
	if !ok {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	var listed []*run
	for _, ru := range s.runs {
		status, conclusion := ru.status()
		if ru.repo == rp && (want == "" || want == status || want == conclusion) && !ru.created.Before(from) && !ru.created.After(to) {
			listed = append(listed, ru)
		}
	}
	// Newest first, as GitHub lists runs.
	slices.SortFunc(listed, func(a, b *run) int { return cmp.Compare(b.id, a.id) })
	// A filtered listing is a search: GitHub finds at most searchCap runs,
	// and says no more.
	if want != "" || r.URL.Query().Get("created") != "" {
		listed = listed[:min(len(listed), searchCap)]
	}
	page := pageJSON(s, w, r, listed, s.runJSON)
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(listed), "workflow_runs": page})
}

// createdRange reads the created filter of a runs listing, in GitHub's
// search syntax for dates: ">=T", "<=T", ">T", "<T" or "A..B" (either end
// "*" for none), each a date or an RFC 3339 time to the second; "" is no
// filter. A date as an upper bound takes in the whole day.
func createdRange(q string) (from, to time.Time, ok bool) {
	from, to = time.Time{}, time.Unix(1<<40, 0)
	if q == "" {
		return from, to, true
	}
	if a, b, isRange := strings.Cut(q, ".."); isRange {
		var okA, okB bool
		from, okA = createdBound(a, from, false)
		to, okB = createdBound(b, to, true)
		return from, to, okA && okB
	}
	for _, op := range []string{">=", "<=", ">", "<"} {
		v, found := strings.CutPrefix(q, op)
		if !found {
			continue
		}
		switch op {
		case ">=":
			from, ok = createdBound(v, from, false)
		case ">":
			from, ok = createdBound(v, from, true)
			from = from.Add(time.Nanosecond)
		case "<=":
			to, ok = createdBound(v, to, true)
		case "<":
			to, ok = createdBound(v, to, false)
			to = to.Add(-time.Nanosecond)
		}
		return from, to, ok
	}
	return from, to, false
}

// createdBound is one end of a created filter: open ("*") keeps def; end
// makes a date or a time to the second take in all of it.
func createdBound(v string, def time.Time, end bool) (time.Time, bool) {
	if v == "*" {
		return def, true
	}
	for _, f := range []struct {
		layout string
		span   time.Duration
	}{{time.RFC3339, time.Second}, {"2006-01-02", 24 * time.Hour}} {
		if t, err := time.Parse(f.layout, v); err == nil {
			if end {
				t = t.Add(f.span - time.Nanosecond)
			}
			return t, true
		}
	}
	return time.Time{}, false
}

func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request) {
	ru := s.runOf(r)
	if ru == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	// filter=latest (the default) lists the jobs of the run's latest
	// attempt, each job's newest; filter=all every attempt's.
	listed := ru.jobs
	if r.URL.Query().Get("filter") != "all" {
		listed = ru.latestJobs()
	}
	page := pageJSON(s, w, r, listed, s.jobJSON)
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(listed), "jobs": page})
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request) {
	j := s.jobOf(r)
	if j == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.jobJSON(j))
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	ru := s.runOf(r)
	if ru == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if status, _ := ru.status(); status == "completed" {
		writeError(w, http.StatusConflict, "Cannot cancel a workflow run that is completed.")
		return
	}
	for _, j := range ru.jobs {
		if j.status != "completed" {
			s.complete(j, "cancelled")
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{})
}

// handleRerun queues a completed job again as a new job of its run, as
// GitHub re-runs it; a job of a run still in progress is refused (403).
func (s *Server) handleRerun(w http.ResponseWriter, r *http.Request) {
	old := s.jobOf(r)
	if old == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if status, _ := old.run.status(); status != "completed" {
		writeError(w, http.StatusForbidden, "Cannot rerun a job of a workflow run that is not completed.")
		return
	}
	s.lastJob++
	j := &job{id: s.lastJob, run: old.run, name: old.name, labels: append([]string{}, old.labels...), status: "queued",
		attempt: old.run.attempt() + 1, created: s.clk.Now()}
	old.run.jobs = append(old.run.jobs, j)
	s.jobs[j.id] = j
	s.announce(j, "queued")
	if rn := s.waitingRunnerFor(j); rn != nil {
		s.start(j, rn.name, rn)
	}
	writeJSON(w, http.StatusCreated, map[string]any{})
}

func (s *Server) handleOrgRepos(w http.ResponseWriter, r *http.Request, sc scopeRef) {
	var listed []*repo
	for _, rp := range s.repos {
		if strings.EqualFold(rp.owner.login, sc.owner) {
			listed = append(listed, rp)
		}
	}
	// Newest first: GitHub's default sort is created, descending.
	slices.SortFunc(listed, func(a, b *repo) int { return cmp.Compare(b.id, a.id) })
	writeJSON(w, http.StatusOK, pageJSON(s, w, r, listed, s.repoJSON))
}
