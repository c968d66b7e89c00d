// Package api serves bullpen's status API (/api/v1/jobs, /instances, /pools)
// to operators holding the admin token. Responses never carry a credential:
// runner configurations and tokens stay out.
package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// PoolInfo is what the configuration says of a pool, for /pools.
type PoolInfo struct {
	Name        string
	Environment string
	Runner      string
	Timezone    string
}

// Server is the status API.
type Server struct {
	Store domain.Store
	Token string
	Log   *slog.Logger
	// Pools lists the configured pools of this environment.
	Pools func() []PoolInfo
}

// Handler returns the API's routes, all behind the admin token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs", s.jobs)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.job)
	mux.HandleFunc("GET /api/v1/instances", s.instances)
	mux.HandleFunc("GET /api/v1/pools", s.pools)
	return s.authorize(mux)
}

func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || s.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bullpen"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token (Authorization: Bearer TOKEN)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// JobView is a job as the API shows it.
type JobView struct {
	ID          int64      `json:"id"`
	RunID       int64      `json:"run_id"`
	Repo        string     `json:"repo"`
	Name        string     `json:"name"`
	Labels      []string   `json:"labels"`
	Status      string     `json:"status"`
	Route       string     `json:"route,omitempty"`
	Via         string     `json:"via,omitempty"`
	Pool        string     `json:"pool,omitempty"`
	Runner      string     `json:"runner,omitempty"`
	InstanceID  string     `json:"instance_id,omitempty"`
	RunnerName  string     `json:"runner_name,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Conclusion  string     `json:"conclusion,omitempty"`
	Attempts    int        `json:"attempts"`
	QueuedAt    *time.Time `json:"queued_at,omitempty"`
	AssignedAt  *time.Time `json:"assigned_at,omitempty"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
}

// ViewJob renders j without its runner configuration.
func ViewJob(j domain.Job) JobView {
	return JobView{
		ID: j.ID, RunID: j.RunID, Repo: j.Repo, Name: j.Name, Labels: j.Labels, Status: string(j.Status),
		Route: string(j.Route), Via: string(j.Via), Pool: j.Pool, Runner: j.Runner, InstanceID: j.InstanceID,
		RunnerName: j.RunnerName, Reason: j.Reason, Conclusion: j.Conclusion, Attempts: j.Attempts,
		QueuedAt: ts(j.QueuedAt), AssignedAt: ts(j.AssignedAt), StartedAt: ts(j.StartedAt),
		CompletedAt: ts(j.CompletedAt), CreatedAt: ts(j.CreatedAt), UpdatedAt: ts(j.UpdatedAt),
	}
}

// InstanceView is an instance as the API shows it.
type InstanceView struct {
	ID           string     `json:"id"`
	CloudID      string     `json:"cloud_id,omitempty"`
	Pool         string     `json:"pool,omitempty"`
	Role         string     `json:"role"`
	Runner       string     `json:"runner"`
	State        string     `json:"state"`
	Job          string     `json:"job,omitempty"`
	JobStarted   bool       `json:"job_started"`
	JobsServed   int        `json:"jobs_served"`
	InstanceType string     `json:"instance_type,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	Deadline     *time.Time `json:"deadline,omitempty"`
	Heartbeat    *time.Time `json:"heartbeat,omitempty"`
	CreatedAt    *time.Time `json:"created_at,omitempty"`
	StateSince   *time.Time `json:"state_since,omitempty"`
}

func viewInstance(in domain.Instance) InstanceView {
	return InstanceView{
		ID: in.ID, CloudID: in.CloudID, Pool: in.Pool, Role: string(in.Role), Runner: in.Runner, State: string(in.State),
		Job: in.Job, JobStarted: in.JobStarted, JobsServed: in.JobsServed, InstanceType: in.InstanceType, Reason: in.Reason,
		Deadline: ts(in.Deadline), Heartbeat: ts(in.Heartbeat), CreatedAt: ts(in.CreatedAt), StateSince: ts(in.StateSince),
	}
}

func ts(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

const maxLimit = 1000

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	f := domain.JobFilter{Pool: r.URL.Query().Get("pool"), Instance: r.URL.Query().Get("instance"), Newest: true}
	limit, err := limitParam(r, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.Limit = limit
	for _, v := range splitParam(r, "status") {
		st := domain.JobStatus(v)
		if !st.Valid() {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown status %q (known: %s)", v, joinStatuses()))
			return
		}
		f.Statuses = append(f.Statuses, st)
	}
	list, err := s.Store.ListJobs(r.Context(), f)
	if err != nil {
		s.fail(w, "list jobs", err)
		return
	}
	out := make([]JobView, len(list))
	for i, j := range list {
		out[i] = ViewJob(j)
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad job id %q: want a positive integer", r.PathValue("id")))
		return
	}
	j, err := s.Store.GetJob(r.Context(), id)
	if errors.Is(err, domain.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %d", id))
		return
	}
	if err != nil {
		s.fail(w, "get job", err)
		return
	}
	writeJSON(w, http.StatusOK, ViewJob(j))
}

func (s *Server) instances(w http.ResponseWriter, r *http.Request) {
	f := domain.InstanceFilter{Pool: r.URL.Query().Get("pool"), Runner: r.URL.Query().Get("runner")}
	for _, v := range splitParam(r, "state") {
		st := domain.State(v)
		if !st.Valid() {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q", v))
			return
		}
		f.States = append(f.States, st)
	}
	if len(f.States) == 0 && r.URL.Query().Get("all") == "" {
		f.States = slices.DeleteFunc(slices.Clone(domain.States), func(s domain.State) bool { return s == domain.StateTerminated })
	}
	list, err := s.Store.ListInstances(r.Context(), f)
	if err != nil {
		s.fail(w, "list instances", err)
		return
	}
	out := make([]InstanceView, len(list))
	for i, in := range list {
		out[i] = viewInstance(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": out})
}

// PoolView joins a pool's configuration with what the converger last saw.
type PoolView struct {
	Name        string         `json:"name"`
	Environment string         `json:"environment,omitempty"`
	Runner      string         `json:"runner"`
	Timezone    string         `json:"timezone,omitempty"`
	Schedule    string         `json:"schedule"`
	Target      domain.Target  `json:"target"`
	Counts      map[string]int `json:"counts"`
	SpecHash    string         `json:"spec_hash,omitempty"`
	LastCycle   *time.Time     `json:"last_cycle,omitempty"`
	LastError   string         `json:"last_error,omitempty"`
}

func (s *Server) pools(w http.ResponseWriter, r *http.Request) {
	statuses, err := s.Store.ListPoolStatus(r.Context())
	if err != nil {
		s.fail(w, "list pool status", err)
		return
	}
	byName := map[string]domain.PoolStatus{}
	for _, st := range statuses {
		byName[st.Name] = st
	}
	var out []PoolView
	for _, p := range s.Pools() {
		st := byName[p.Name]
		counts := st.Counts
		if counts == nil {
			counts = map[string]int{}
		}
		out = append(out, PoolView{Name: p.Name, Environment: p.Environment, Runner: p.Runner, Timezone: p.Timezone,
			Schedule: st.Schedule, Target: st.Target, Counts: counts, SpecHash: st.SpecHash,
			LastCycle: ts(st.LastCycle), LastError: st.LastError})
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

func (s *Server) fail(w http.ResponseWriter, what string, err error) {
	s.Log.Error("status API: "+what, "err", err)
	writeError(w, http.StatusInternalServerError, what+" failed; see the server log")
}

func limitParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > maxLimit {
		return 0, fmt.Errorf("bad limit %q: want 1..%d", v, maxLimit)
	}
	return n, nil
}

func splitParam(r *http.Request, key string) []string {
	var out []string
	for _, v := range r.URL.Query()[key] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func joinStatuses() string {
	var s []string
	for _, st := range domain.JobStatuses {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
