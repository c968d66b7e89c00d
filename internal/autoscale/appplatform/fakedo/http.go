package fakedo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const rateLimitPerHour = 5000

// DigitalOcean's error ids by status.
var errorIDs = map[int]string{
	http.StatusBadRequest:          "bad_request",
	http.StatusUnauthorized:        "unauthorized",
	http.StatusForbidden:           "forbidden",
	http.StatusNotFound:            "not_found",
	http.StatusConflict:            "conflict",
	http.StatusUnprocessableEntity: "unprocessable_entity",
	http.StatusTooManyRequests:     "too_many_requests",
	http.StatusInternalServerError: "server_error",
	http.StatusServiceUnavailable:  "service_unavailable",
}

var errorMessages = map[int]string{
	http.StatusUnauthorized:        "Unable to authenticate you",
	http.StatusNotFound:            "The resource you were accessing could not be found.",
	http.StatusConflict:            "The app is being updated by another request; try again.",
	http.StatusTooManyRequests:     "API Rate limit exceeded.",
	http.StatusInternalServerError: "Server was unable to give you a response.",
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/apps/{id}", s.handleGet)
	mux.HandleFunc("PUT /v2/apps/{id}", s.handlePut)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lastReq++
		w.Header().Set("X-Request-Id", fmt.Sprintf("%08x-0000-4000-8000-%012x", s.lastReq, s.lastReq))
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		if s.intercept(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// intercept answers the request itself for bad credentials, a rate limit
// or an injected failure, and reports whether it did. Called under s.mu.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request) bool {
	now := s.clk.Now()
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		s.writeError(w, http.StatusUnauthorized)
		return true
	}
	if now.Before(s.rateReset) {
		s.rateHeaders(w, 0, s.rateReset)
		s.writeError(w, http.StatusTooManyRequests)
		return true
	}
	for _, f := range s.fails {
		if f.n > 0 && (f.method == "" || f.method == r.Method) {
			f.n--
			if f.status == http.StatusTooManyRequests {
				s.rateHeaders(w, 0, now.Add(time.Minute))
			}
			s.writeError(w, f.status)
			return true
		}
	}
	s.rateHeaders(w, rateLimitPerHour-len(s.requests), now.Add(time.Hour))
	return false
}

func (s *Server) rateHeaders(w http.ResponseWriter, remaining int, reset time.Time) {
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(rateLimitPerHour))
	h.Set("RateLimit-Remaining", strconv.Itoa(max(remaining, 0)))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
}

func (s *Server) writeError(w http.ResponseWriter, status int) {
	s.writeErrorMessage(w, status, "")
}

func (s *Server) writeErrorMessage(w http.ResponseWriter, status int, message string) {
	id := errorIDs[status]
	if id == "" {
		id = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
	}
	if message == "" {
		message = errorMessages[status]
	}
	if message == "" {
		message = http.StatusText(status)
	}
	writeJSON(w, status, map[string]any{"id": id, "message": message, "request_id": w.Header().Get("X-Request-Id")})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	a := s.apps[r.PathValue("id")]
	if a == nil {
		s.writeError(w, http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"app": a.json()})
	// Another writer acting right after this read, before the reader's
	// next request: the handler still holds s.mu.
	if len(a.afterGet) > 0 {
		f := a.afterGet[0]
		a.afterGet = a.afterGet[1:]
		a.change(f, "another writer", s.clk.Now())
	}
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	a := s.apps[r.PathValue("id")]
	if a == nil {
		s.writeError(w, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		s.writeErrorMessage(w, http.StatusBadRequest, "could not read the request body")
		return
	}
	req, err := decodeObject(body)
	if err != nil {
		s.writeErrorMessage(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	spec, _ := req["spec"].(map[string]any)
	if problem := validate(spec); problem != "" {
		s.writeErrorMessage(w, http.StatusBadRequest, problem)
		return
	}
	if v, ok := req["update_all_source_versions"]; ok && v != false {
		s.writeErrorMessage(w, http.StatusBadRequest, "update_all_source_versions must be a boolean")
		return
	}
	now := s.clk.Now()
	a.setSpec(spec, "app spec updated", now)
	s.updates = append(s.updates, clone(spec))
	writeJSON(w, http.StatusOK, map[string]any{"app": a.json()})
	if len(a.afterPut) > 0 {
		f := a.afterPut[0]
		a.afterPut = a.afterPut[1:]
		a.change(f, "another writer", now)
	}
}

// validate checks what App Platform would refuse in a spec: a missing
// name, and workers without a name or with an instance_count outside
// 1..250.
func validate(spec map[string]any) string {
	if spec == nil {
		return "spec is required"
	}
	if name, _ := spec["name"].(string); name == "" {
		return "spec.name is required"
	}
	workers, _ := spec["workers"].([]any)
	for i, w := range workers {
		m, ok := w.(map[string]any)
		if !ok {
			return fmt.Sprintf("spec.workers[%d] is not an object", i)
		}
		if name, _ := m["name"].(string); name == "" {
			return fmt.Sprintf("spec.workers[%d].name is required", i)
		}
		raw, ok := m["instance_count"]
		if !ok {
			continue
		}
		n, isNum := raw.(json.Number)
		v, err := n.Int64()
		if !isNum || err != nil || v < 1 || v > 250 {
			return fmt.Sprintf("spec.workers[%d].instance_count must be a whole number from 1 to 250", i)
		}
	}
	return ""
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (a *app) json() map[string]any {
	out := map[string]any{
		"id":                         a.id,
		"owner_uuid":                 a.ownerUUID,
		"spec":                       clone(a.spec),
		"created_at":                 timestamp(a.created),
		"updated_at":                 timestamp(a.updated),
		"last_deployment_created_at": timestamp(a.updated),
		"tier_slug":                  "basic",
		"region": map[string]any{
			"slug": "nyc", "label": "New York", "flag": "usa", "continent": "North America",
			"data_centers": []string{"nyc1", "nyc3"},
		},
	}
	if a.active != nil {
		out["active_deployment"] = a.active.json()
		out["last_deployment_active_at"] = timestamp(a.active.updated)
	}
	if a.pending != nil {
		out["pending_deployment"] = a.pending.json()
	}
	return out
}

func (d *deployment) json() map[string]any {
	return map[string]any{
		"id": d.id, "spec": clone(d.spec), "phase": d.phase, "cause": d.cause,
		"created_at": timestamp(d.created), "updated_at": timestamp(d.updated),
		"phase_last_updated_at": timestamp(d.updated),
		"progress":              map[string]any{"success_steps": 0, "total_steps": 0, "steps": []any{}},
	}
}
