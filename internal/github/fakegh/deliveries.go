package fakegh

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// GitHub's side of the webhook: once SendDeliveries names a receiver, every
// job that is queued, started or completed is announced to it as a signed
// workflow_job delivery, in order, as GitHub would. Runner processes reach
// the fake over HTTP (POST /_fake/jit/run and /_fake/jit/done with their
// JIT config as the body), so a runner started on a machine takes a queued
// job and finishes it as a real one would.

const (
	routeRunJIT  = "POST /_fake/jit/run"
	routeDoneJIT = "POST /_fake/jit/done"
)

type delivery struct {
	id   string
	body []byte
}

type sender struct {
	url, secret string
	skip        int // deliveries to drop, as a missed webhook
	pending     []delivery
	wake, done  chan struct{}
	closed      bool
	seq         int
}

// SendDeliveries makes the fake announce every job event from now on to
// url (bullpen's /webhook), signed with secret.
func (s *Server) SendDeliveries(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hook == nil {
		s.hook = &sender{wake: make(chan struct{}, 1), done: make(chan struct{})}
		go s.deliver(s.hook, s.hook.wake, s.hook.done)
	}
	s.hook.url, s.hook.secret = url, secret
}

// MissNextDeliveries drops the next n deliveries, as a webhook GitHub
// failed to deliver.
func (s *Server) MissNextDeliveries(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hook != nil {
		s.hook.skip += n
	}
}

// announce queues a delivery of j's action; called with s.mu held.
func (s *Server) announce(j *job, action string) {
	h := s.hook
	if h == nil {
		return
	}
	if h.skip > 0 {
		h.skip--
		return
	}
	h.seq++
	body, _ := json.Marshal(s.workflowJobEvent(j, action))
	h.pending = append(h.pending, delivery{id: fmt.Sprintf("fake-%d-%d", j.id, h.seq), body: body})
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// deliver posts queued deliveries in order, each until the receiver takes
// it (GitHub gives up sooner; a fake that loses nothing keeps tests exact).
func (s *Server) deliver(h *sender, wake, done <-chan struct{}) {
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		select {
		case <-wake:
		case <-done:
			return
		}
		for {
			s.mu.Lock()
			if len(h.pending) == 0 {
				s.mu.Unlock()
				break
			}
			d, url, secret := h.pending[0], h.url, h.secret
			s.mu.Unlock()
			if !post(client, url, secret, d) {
				select { // the receiver is down: GitHub would redeliver later
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			s.mu.Lock()
			h.pending = h.pending[1:]
			s.mu.Unlock()
		}
	}
}

func post(client *http.Client, url, secret string, d delivery) bool {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(d.body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", d.id)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 300
}

// workflowJobEvent is the delivery GitHub sends for j.
func (s *Server) workflowJobEvent(j *job, action string) map[string]any {
	wj := map[string]any{
		"id": j.id, "run_id": j.run.id, "run_attempt": 1, "name": j.name, "workflow_name": j.run.workflow,
		"status": j.status, "conclusion": nilIfEmpty(j.conclusion), "labels": j.labels,
		"runner_name": nilIfEmpty(j.runnerName), "head_branch": DefaultHeadBranch,
		"html_url":   fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", htmlBase, j.run.repo.fullName(), j.run.id, j.id),
		"created_at": timestamp(j.created), "started_at": timestamp(j.created),
	}
	if j.runner != nil {
		wj["runner_id"] = j.runner.id
	}
	if !j.completed.IsZero() {
		wj["completed_at"] = timestamp(j.completed)
	}
	ev := map[string]any{
		"action": action, "workflow_job": wj,
		"repository": map[string]any{"id": j.run.repo.id, "name": j.run.repo.name, "full_name": j.run.repo.fullName(),
			"owner": map[string]any{"login": j.run.repo.owner.login, "id": j.run.repo.owner.id}},
	}
	for _, in := range s.auth.installations {
		if in.account == "" || in.account == strings.ToLower(j.run.repo.owner.login) {
			ev["installation"] = map[string]any{"id": in.id}
		}
	}
	return ev
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// handleRunJIT: a runner process connects with its JIT config and takes a
// queued job with its labels; the answer is the job's id.
func (s *Server) handleRunJIT(w http.ResponseWriter, r *http.Request) {
	config, err := readAll(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "no JIT config")
		return
	}
	id, err := s.RunJIT(config)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job_id": id})
}

// handleDoneJIT: the runner's job succeeded.
func (s *Server) handleDoneJIT(w http.ResponseWriter, r *http.Request) {
	config, err := readAll(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "no JIT config")
		return
	}
	for _, rn := range s.runners {
		if rn.jit == config && rn.job != nil {
			s.complete(rn.job, "success")
			writeJSON(w, http.StatusOK, map[string]any{"done": true})
			return
		}
	}
	writeError(w, http.StatusNotFound, "no runner with this JIT config runs a job")
}

// isFakeRoute: the fake's own control routes, for runner processes, which
// carry no GitHub credentials.
func isFakeRoute(pattern string) bool { return pattern == routeRunJIT || pattern == routeDoneJIT }

func readAll(r *http.Request) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("empty body: %v", err)
	}
	return strings.TrimSpace(string(b)), nil
}
