package agentapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// running gives an introduced instance job 101 and has it register and
// start the job.
func (h *harness) running(id string) (domain.Instance, string) {
	h.t.Helper()
	in, token := h.launched(id)
	h.Move(in.ID, func(i *domain.Instance) { i.State = domain.StateReady })
	h.Assign(in.ID, 101, "jit-"+id)
	wantStatus(h.t, h.signal(token, agentapi.SignalRequest{Kind: "registered", Job: "101"}), http.StatusNoContent, "")
	wantStatus(h.t, h.signal(token, agentapi.SignalRequest{Kind: "job-started", Job: "101"}), http.StatusNoContent, "")
	return h.Get(in.ID), token
}

// The release timeout, through the API: a
// deregistered signal after the releasing deadline is refused, and the
// expired instance is neither made ready nor put in the resource pool: it is
// terminated, so the agent stops releasing a machine nobody will reuse.
func TestLateDeregisteredCannotPoolAnExpiredInstance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  time.Duration // since the release began
		status int
		state  domain.State
		pooled int
	}{
		{"in time", time.Minute, http.StatusNoContent, domain.StateReady, 1},
		{"at the deadline", domain.DefaultDeadlines().Releasing, http.StatusConflict, domain.StateTerminating, 0},
		{"long after", time.Hour, http.StatusConflict, domain.StateTerminating, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.SetPolicy(agents.Policy{Reuse: true})
			in, token := h.running("bp-1")
			wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "job-finished", Job: "101", Reason: "exit status 0"}),
				http.StatusNoContent, "")
			released := h.Get(in.ID)
			if released.State != domain.StateReleasing || released.Job != "" {
				t.Fatalf("after its job: %s %q, want releasing, unbound", released.State, released.Job)
			}
			h.Clock.Advance(tc.after)
			w := h.signal(token, agentapi.SignalRequest{Kind: "deregistered"})
			if tc.status == http.StatusConflict {
				e := wantStatus(t, w, tc.status, agentapi.CodeRejected)
				if !strings.Contains(e.Error, "release timed out") {
					t.Fatalf("reason %q does not say the release timed out", e.Error)
				}
			} else {
				wantStatus(t, w, tc.status, "")
			}
			if got := h.Get(in.ID).State; got != tc.state {
				t.Fatalf("instance is %s, want %s", got, tc.state)
			}
			if got := h.ResourcePool("small"); len(got) != tc.pooled {
				t.Fatalf("resource pool holds %d entries, want %d", len(got), tc.pooled)
			}
		})
	}
}

func TestMalformedSignalsAreRefusedAndChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"not JSON", `kind=warm`, http.StatusBadRequest, "malformed JSON"},
		{"truncated", `{"kind":"job-finished","job":"101"`, http.StatusBadRequest, "malformed JSON"},
		{"two objects", `{"kind":"warm"}{"kind":"warm"}`, http.StatusBadRequest, "more than one"},
		{"wrong type", `{"kind":"job-finished","job":101}`, http.StatusBadRequest, "malformed JSON"},
		{"missing kind", `{"job":"101"}`, http.StatusBadRequest, "missing field(s): kind"},
		{"unknown kind", `{"kind":"finished","job":"101"}`, http.StatusBadRequest, `unknown signal "finished"`},
		{"unknown kind names every kind", `{"kind":"spot"}`, http.StatusBadRequest, "deregistered, failed or interrupted"},
		{"heartbeat as a signal", `{"kind":"heartbeat"}`, http.StatusBadRequest, "unknown signal"},
		{"job-finished without job", `{"kind":"job-finished"}`, http.StatusBadRequest, "missing field(s): job"},
		{"registered without job", `{"kind":"registered","reason":"x"}`, http.StatusBadRequest, "missing field(s): job"},
		{"bad job key", `{"kind":"job-started","job":"j-101"}`, http.StatusBadRequest, "bad job key"},
		{"unknown field", `{"kind":"job-finished","job":"101","instance":"bp-2"}`, http.StatusBadRequest, "unknown field"},
		{"reason too long", `{"kind":"failed","reason":"` + strings.Repeat("x", agentapi.MaxReason+1) + `"}`,
			http.StatusBadRequest, "reason: longer than"},
		{"body too large", `{"kind":"failed","reason":"` + strings.Repeat("x", agentapi.MaxBody) + `"}`,
			http.StatusRequestEntityTooLarge, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before, token := h.running("bp-1")
			w := h.do(http.MethodPost, agentapi.PathSignal, token, tc.body)
			code := agentapi.CodeBadRequest
			if tc.status == http.StatusRequestEntityTooLarge {
				code = agentapi.CodeTooLarge
			}
			e := wantStatus(t, w, tc.status, code)
			if !strings.Contains(e.Error, tc.want) {
				t.Fatalf("message %q does not say %q", e.Error, tc.want)
			}
			h.WantUnchanged(before)
			if n := h.Calls.Count(func(c agentapiCall) bool {
				return c.Op == "signal" && c.Signal.Kind != "registered" && c.Signal.Kind != "job-started"
			}); n != 0 {
				t.Fatalf("%d malformed signals reached the control plane", n)
			}
		})
	}
}

func TestOutOfOrderSignalsAreRejectedAndChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  agentapi.SignalRequest
		want string
	}{
		{"deregistered while running", agentapi.SignalRequest{Kind: "deregistered"}, "not releasing"},
		{"registered for another job", agentapi.SignalRequest{Kind: "registered", Job: "202"}, `not "202"`},
		{"job-finished for another job", agentapi.SignalRequest{Kind: "job-finished", Job: "202"}, "202"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before, token := h.running("bp-1")
			e := wantStatus(t, h.signal(token, tc.req), http.StatusConflict, agentapi.CodeRejected)
			if !strings.Contains(e.Error, tc.want) {
				t.Fatalf("reason %q does not say %q", e.Error, tc.want)
			}
			h.WantUnchanged(before)
		})
	}
	t.Run("job-started on an idle instance", func(t *testing.T) {
		h := newHarness(t)
		in, token := h.launched("bp-1")
		wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "warm"}), http.StatusNoContent, "")
		before := h.Get(in.ID)
		wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "job-started", Job: "101"}), http.StatusConflict, agentapi.CodeRejected)
		h.WantUnchanged(before)
	})
}

// Trouble in the control plane is the agent's cue to retry: 503 with
// Retry-After, never a 4xx that would make it give up.
func TestStoreTroubleIsTransient(t *testing.T) {
	h := newHarness(t)
	in, token := h.launched("bp-1")
	h.Store.Close()
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHeartbeat, token, ""), http.StatusServiceUnavailable, agentapi.CodeUnavailable)
	wantStatus(t, h.signal(token, agentapi.SignalRequest{Kind: "warm"}), http.StatusServiceUnavailable, agentapi.CodeUnavailable)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHello, "", helloBody(in.CloudID, in.LaunchID, "x")),
		http.StatusServiceUnavailable, agentapi.CodeUnavailable)
}

func TestUnknownPathsAndMethods(t *testing.T) {
	h := newHarness(t)
	wantStatus(t, h.do(http.MethodGet, agentapi.Prefix+"instances", "", ""), http.StatusNotFound, agentapi.CodeNotFound)
	w := h.do(http.MethodGet, agentapi.PathSignal, "", "")
	wantStatus(t, w, http.StatusMethodNotAllowed, agentapi.CodeNotFound)
	if w.Header().Get("Allow") != http.MethodPost {
		t.Fatalf("Allow: %q", w.Header().Get("Allow"))
	}
}

// A spot interruption notice, through the API: it names no job, is
// accepted, and takes the instance out of service with its started job
// marked interrupted. The instance's token dies with it: a repeat is told
// the instance ended.
func TestInterruptedSignal(t *testing.T) {
	h := newHarness(t)
	in, token := h.running("bp-1")
	notice := agentapi.SignalRequest{Kind: "interrupted", Reason: "terminate at 2026-11-23T09:02:00Z"}
	wantStatus(t, h.signal(token, notice), http.StatusNoContent, "")
	// Its job started: the machine leaves service but runs on until the
	// notice's time (two minutes after the harness's clock at most), and
	// its token stays good for the job's end.
	got := h.Get(in.ID)
	notice2 := time.Date(2026, 11, 23, 9, 2, 0, 0, time.UTC)
	if limit := h.Clock.Now().Add(2 * time.Minute); limit.Before(notice2) {
		notice2 = limit
	}
	if !got.Leaving() || got.Job != "101" || !got.Deadline.Equal(notice2) {
		t.Fatalf("instance %s bound to %q until %v (leaving %v), want leaving, still bound to its started job until %v", got.State, got.Job, got.Deadline, got.Leaving(), notice2)
	}
	j, err := h.Store.GetJob(h.Ctx, 101)
	if err != nil || !j.Interrupted {
		t.Fatalf("job %+v (%v), want it marked interrupted", j, err)
	}
	wantStatus(t, h.signal(token, notice), http.StatusNoContent, "")
	if again := h.Get(in.ID); again.Version != got.Version {
		t.Errorf("a repeated notice changed the instance: %+v", again)
	}
}
