package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

// delivery is one webhook as the recorder received it.
type delivery struct {
	event, id string
	body      []byte
	action    string
	jobID     int64
	status    string
	runner    *string
}

// recorder collects webhooks; safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	got  []delivery
	fail func(format string, args ...any)
	// onCompleted, when set, hears of every completed job's id.
	onCompleted func(jobID int64)
}

func (r *recorder) deliver(event, id string, body []byte) {
	var p struct {
		Action      string `json:"action"`
		WorkflowJob struct {
			ID         int64   `json:"id"`
			Status     string  `json:"status"`
			RunnerName *string `json:"runner_name"`
		} `json:"workflow_job"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		r.fail("webhook %s is not JSON: %v", id, err)
	}
	r.mu.Lock()
	r.got = append(r.got, delivery{event: event, id: id, body: body, action: p.Action,
		jobID: p.WorkflowJob.ID, status: p.WorkflowJob.Status, runner: p.WorkflowJob.RunnerName})
	notify := r.onCompleted
	r.mu.Unlock()
	if notify != nil && p.Action == "completed" {
		notify(p.WorkflowJob.ID)
	}
}

func (r *recorder) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// actions returns the actions delivered for one job, in order.
func (r *recorder) actions(jobID int64) []string {
	var out []string
	for _, d := range r.all() {
		if d.jobID == jobID {
			out = append(out, d.action)
		}
	}
	return out
}

// env is a sim on a virtual clock with a webhook recorder.
type env struct {
	t   *testing.T
	clk *clock.Virtual
	gh  *sim.GitHub
	rec *recorder
}

func newEnv(t *testing.T, opts sim.Options) *env {
	t.Helper()
	rec := &recorder{fail: t.Errorf}
	opts.Deliver = rec.deliver
	clk := clock.NewVirtual(epoch)
	return &env{t: t, clk: clk, gh: sim.New(clk, opts), rec: rec}
}

// advance moves the clock and waits for what the time set off.
func (e *env) advance(d time.Duration) {
	e.clk.Advance(d)
	e.clk.Settle()
}

var org = domain.Scope{Owner: "acme"}

func (e *env) register(name string, labels ...string) domain.RunnerRegistration {
	e.t.Helper()
	reg, err := e.gh.RegisterRunner(e.t.Context(), org, name, labels)
	if err != nil {
		e.t.Fatalf("RegisterRunner: %v", err)
	}
	return reg
}

// runnerLog records a runner process's callbacks.
type runnerLog struct {
	mu      sync.Mutex
	started []int64
	done    []string // "jobID:conclusion"
}

func (l *runnerLog) onStart(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = append(l.started, id)
}

func (l *runnerLog) onDone(id int64, conclusion string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = append(l.done, fmt.Sprintf("%d:%s", id, conclusion))
}

func (l *runnerLog) snapshot() ([]int64, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.started...), append([]string(nil), l.done...)
}

// run starts the runner process of reg with a context that ends with the
// test, or earlier through the returned cancel.
func (e *env) run(reg domain.RunnerRegistration) (*runnerLog, context.CancelFunc) {
	e.t.Helper()
	l := &runnerLog{}
	ctx, cancel := context.WithCancel(e.t.Context())
	if err := e.gh.RunJIT(ctx, reg.JITConfig, l.onStart, l.onDone); err != nil {
		e.t.Fatalf("RunJIT: %v", err)
	}
	return l, cancel
}

func (e *env) job(id int64) sim.JobRecord {
	e.t.Helper()
	j, ok := e.gh.Job(id)
	if !ok {
		e.t.Fatalf("job %d unknown", id)
	}
	return j
}

func (e *env) listed(id int64) (domain.GitHubRunner, bool) {
	e.t.Helper()
	rs, err := e.gh.ListRunners(e.t.Context(), org)
	if err != nil {
		e.t.Fatalf("ListRunners: %v", err)
	}
	for _, r := range rs {
		if r.ID == id {
			return r, true
		}
	}
	return domain.GitHubRunner{}, false
}
