// Package api serves bullpen's status API (/api/v1/jobs, /instances, /pools,
// /spot) to operators holding the admin token. Responses never carry a credential:
// runner configurations and tokens stay out.
//
// The lists of jobs and of instances are newest first (jobs take
// order=oldest) and take limit=N: 100 by default, at most MaxLimit (1000);
// a limit outside 1..1000 is a 400. A full page carries "next", a cursor
// that after=CURSOR, with the same filters, turns into the page that
// follows (see cursor).
// Their pool filter, and the jobs' instance filter (bullpen's instance id
// or the provider's), refuse with a 400 a name that matches nothing known,
// rather than answer an empty list.
package api

import (
	"context"
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
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
)

// PoolInfo is what the configuration says of a pool, for /pools.
type PoolInfo struct {
	Name        string
	Environment string
	Runner      string
	Timezone    string
	// NextChange is when the schedule next changes the pool's target, and
	// Next the entry that applies then; zero when nothing changes within a
	// week.
	NextChange time.Time
	Next       string
}

// Server is the status API.
type Server struct {
	Store Store
	Token string
	// ViewerToken, when set, is the dashboard's read-only token. The API
	// refuses it (403) but knows it, so that a viewer's script calling the
	// API is told why and is not throttled as a guesser of the admin token.
	ViewerToken string
	Log         *slog.Logger // nil: slog.Default()
	// Pools lists the configured pools of this environment; nil lists none.
	Pools func() []PoolInfo
	// SpotBreakers lists the runner classes the spot circuit breaker keeps
	// on-demand now; nil lists none.
	SpotBreakers func() []spotbreaker.Open
	// Limiter throttles addresses that offer too many wrong tokens, and
	// counts the refusals; shared with the dashboard, which checks the same
	// admin and viewer tokens. Nil throttles and counts nothing.
	Limiter *httpauth.Limiter
}

// Handler returns the API's routes, all behind the admin token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs", s.jobs)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.job)
	mux.HandleFunc("GET /api/v1/instances", s.instances)
	mux.HandleFunc("GET /api/v1/pools", s.pools)
	mux.HandleFunc("GET /api/v1/spot", s.spot)
	return s.authorize(httpauth.NewTokens(s.Token, s.ViewerToken), jsonRefusals(mux))
}

// Mount serves the API on mux under /api, the bare /api and /api/v1
// included: a server's mux would otherwise redirect /api/v1 to /api/v1/ or
// hand an unknown /api path to its catch-all (the dashboard), and a client
// of the API would get HTML where it expects the API's JSON errors.
func (s *Server) Mount(mux *http.ServeMux) {
	h := s.Handler()
	mux.Handle("/api", h)
	mux.Handle("/api/", h)
}

// jsonRefusals answers the requests mux has no route for (an unknown path,
// or a method the path does not take) in the API's JSON error shape rather
// than the mux's plain text, keeping the mux's status and its Allow header.
func jsonRefusals(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// The mux's own refusal decides 404 or 405 and what to allow; only
		// its status and headers are kept.
		refusal := &headerRecorder{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(refusal, r)
		switch refusal.code {
		case http.StatusMethodNotAllowed:
			allow := refusal.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, refusal.code, fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		case http.StatusNotFound:
			writeError(w, refusal.code, fmt.Sprintf("no endpoint %s (endpoints: /api/v1/jobs, /api/v1/jobs/{id}, "+
				"/api/v1/instances, /api/v1/pools, /api/v1/spot)", r.URL.Path))
		default:
			writeError(w, refusal.code, http.StatusText(refusal.code))
		}
	})
}

// headerRecorder keeps what a handler sets of a response but its body.
type headerRecorder struct {
	header http.Header
	code   int
	wrote  bool
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(code int) {
	if !h.wrote {
		h.code, h.wrote = code, true
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

// authorize lets through requests bearing the admin token. A request
// bearing none is refused without counting against its address: it
// guessed nothing. Nor does the viewer token count: it is refused for its
// role, not as a guess.
func (s *Server) authorize(tokens httpauth.Tokens, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, offered := httpauth.Bearer(r.Header.Get("Authorization"))
		var role httpauth.Role
		ok := false
		if offered {
			var wait time.Duration
			role, wait, ok = s.Limiter.CheckToken(r, httpauth.SurfaceAPI, tokens, got)
			if wait > 0 {
				secs := httpauth.RetryAfter(w, wait)
				writeError(w, http.StatusTooManyRequests,
					fmt.Sprintf("too many wrong tokens from this address; try again in %d s", secs))
				return
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bullpen"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token (Authorization: Bearer TOKEN)")
			return
		}
		if role != httpauth.RoleAdmin {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bullpen", error="insufficient_scope"`)
			writeError(w, http.StatusForbidden,
				"this is the viewer token, which reads the dashboard only; the status API takes the admin token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxLimit is the most jobs, or instances, one answer lists.
const MaxLimit = 1000

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, []string{"pool", "instance", "limit", "order", "after"}, []string{"status"}); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f := domain.JobFilter{Pool: r.URL.Query().Get("pool"), Instance: r.URL.Query().Get("instance")}
	// The oldest first reaches what waited longest in a backlog longer
	// than a page, which the newest first cannot list at all.
	switch order := r.URL.Query().Get("order"); order {
	case "", "newest":
		f.Newest = true
	case "oldest":
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad order %q: want newest or oldest", order))
		return
	}
	limit, err := limitParam(r, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.Limit = limit
	if f.Statuses, err = namesParam(r, "status", domain.JobStatuses); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.After, err = afterParam[int64](r, f.Newest); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	list, err := s.Store.ListJobs(r.Context(), f)
	if err != nil {
		s.fail(w, "list jobs", err)
		return
	}
	if len(list) == 0 && f.Instance != "" {
		// Only an empty answer is looked into: a list of jobs shows the
		// instance exists, and the common case costs nothing more. The
		// name may be the provider's id (an EC2 instance id), which an
		// operator holds as often as bullpen's own.
		id, found, err := s.instanceByCloudID(r.Context(), f.Instance)
		if err != nil {
			s.fail(w, "find instance", err)
			return
		}
		if found {
			f.Instance = id
			if list, err = s.Store.ListJobs(r.Context(), f); err != nil {
				s.fail(w, "list jobs", err)
				return
			}
		} else if _, err := s.Store.GetInstance(r.Context(), f.Instance); errors.Is(err, domain.ErrNotFound) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown instance %q: no instance has that id (bp-…) or cloud id", f.Instance))
			return
		} else if err != nil {
			s.fail(w, "get instance", err)
			return
		}
	}
	writeList(s, w, r, f.Pool, "jobs", list, ViewJob, nextCursor(list, limit, f.Newest, domain.Job.Position))
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

// instances lists the newest instances first, at most limit of them, as
// jobs does: a store keeps terminated rows, which all=1 lists too, so the
// store is asked for the page alone rather than every row to cut here.
func (s *Server) instances(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, []string{"pool", "runner", "all", "limit", "after"}, []string{"state"}); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f := domain.InstanceFilter{Pool: r.URL.Query().Get("pool"), Runner: r.URL.Query().Get("runner")}
	var err error
	if f.States, err = namesParam(r, "state", domain.States); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := boolParam(r, "all")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := limitParam(r, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(f.States) == 0 && !all {
		f.States = liveStates()
	}
	f.Limit, f.Newest = limit, true
	if f.After, err = afterParam[string](r, f.Newest); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	list, err := s.Store.ListInstances(r.Context(), f)
	if err != nil {
		s.fail(w, "list instances", err)
		return
	}
	writeList(s, w, r, f.Pool, "instances", list, viewInstance, nextCursor(list, limit, f.Newest, domain.Instance.Position))
}

// writeList answers a listing under key, each row shown by view, and next
// unless it is empty. An empty list filtered by pool is first checked
// against the pools bullpen knows (checkPool), so only a list with no rows
// pays for that look-up.
func writeList[T, V any](s *Server, w http.ResponseWriter, r *http.Request, pool, key string, list []T, view func(T) V, next string) {
	if len(list) == 0 && !s.checkPool(w, r, pool) {
		return
	}
	out := make([]V, len(list))
	for i, x := range list {
		out[i] = view(x)
	}
	body := map[string]any{key: out}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

// instanceByCloudID returns the id of the instance whose machine has the
// provider's id cloudID (an EC2 instance id, say): an operator holds that
// id as often as bullpen's own.
func (s *Server) instanceByCloudID(ctx context.Context, cloudID string) (string, bool, error) {
	list, err := s.Store.ListInstances(ctx, domain.InstanceFilter{CloudID: cloudID, Limit: 1})
	if err != nil || len(list) == 0 {
		return "", false, err
	}
	return list[0].ID, true, nil
}

// checkPool answers 400 and returns false when pool, a list's filter, names
// a pool that is neither configured nor recorded in any job, instance or
// pool status: a misspelt pool would otherwise answer an empty list, read
// as a pool with nothing in it. A pool no longer configured is still known
// by what it left behind. Lists ask only when they came back empty, so a
// list with rows costs no more.
func (s *Server) checkPool(w http.ResponseWriter, r *http.Request, pool string) bool {
	if pool == "" {
		return true
	}
	var configured []string
	if s.Pools != nil {
		for _, p := range s.Pools() {
			configured = append(configured, p.Name)
		}
	}
	known, err := s.poolRecorded(r.Context(), pool)
	if err != nil {
		s.fail(w, "find pool", err)
		return false
	}
	if known || slices.Contains(configured, pool) {
		return true
	}
	names := "none is configured"
	if len(configured) > 0 {
		names = "configured: " + strings.Join(configured, ", ")
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown pool %q: neither configured nor recorded in any job or instance (%s)",
		pool, names))
	return false
}

// poolRecorded reports whether any job, instance or pool status the store
// keeps names pool.
func (s *Server) poolRecorded(ctx context.Context, pool string) (bool, error) {
	statuses, err := s.Store.ListPoolStatus(ctx)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(statuses, func(st domain.PoolStatus) bool { return st.Name == pool }) {
		return true, nil
	}
	jobs, err := s.Store.ListJobs(ctx, domain.JobFilter{Pool: pool, Limit: 1})
	if err != nil || len(jobs) > 0 {
		return len(jobs) > 0, err
	}
	insts, err := s.Store.ListInstances(ctx, domain.InstanceFilter{Pool: pool, Limit: 1})
	return len(insts) > 0, err
}

func (s *Server) pools(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, nil, nil); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	statuses, err := s.Store.ListPoolStatus(r.Context())
	if err != nil {
		s.fail(w, "list pool status", err)
		return
	}
	byName := map[string]domain.PoolStatus{}
	for _, st := range statuses {
		byName[st.Name] = st
	}
	var configured []PoolInfo
	if s.Pools != nil {
		configured = s.Pools()
	}
	out := []PoolView{}
	if len(configured) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"pools": out})
		return
	}
	// One listing for every pool: a query per pool would grow with the
	// configuration, on every request.
	live, err := s.Store.ListInstances(r.Context(), domain.InstanceFilter{States: liveStates()})
	if err != nil {
		s.fail(w, "list instances", err)
		return
	}
	members := map[string][]domain.Instance{}
	for _, in := range live {
		if in.Pool != "" {
			members[in.Pool] = append(members[in.Pool], in)
		}
	}
	for _, p := range configured {
		v := PoolView{Name: p.Name, Environment: p.Environment, Runner: p.Runner, Timezone: p.Timezone,
			Counts: liveCounts(members[p.Name]), NextChange: ts(p.NextChange), NextSchedule: p.Next}
		if st, ok := byName[p.Name]; ok && !st.LastCycle.IsZero() {
			target := st.Target
			v.Schedule, v.Target, v.SpecHash, v.LastCycle, v.LastError = st.Schedule, &target, st.SpecHash, ts(st.LastCycle), st.LastError
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

// liveStates is every state but terminated: what the lists show unless
// asked for everything.
func liveStates() []domain.State {
	return slices.DeleteFunc(slices.Clone(domain.States), func(s domain.State) bool { return s == domain.StateTerminated })
}

func (s *Server) fail(w http.ResponseWriter, what string, err error) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	// WARN: a store that cannot be read fails the loops too, and they say
	// so on /healthz and in bullpen_loop_failures_total; a request that
	// met it needs no human of its own.
	log.Warn("status API: "+what, "err", err)
	writeError(w, http.StatusInternalServerError, what+" failed; see the server log")
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

// spot lists the runner classes launching on-demand after repeated spot
// interruptions.
func (s *Server) spot(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, nil, nil); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	open := []spotbreaker.Open{}
	if s.SpotBreakers != nil {
		open = append(open, s.SpotBreakers()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"open": open})
}
