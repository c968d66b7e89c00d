package sim_test

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

var uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestWebhooksFollowTheJobThroughItsLife(t *testing.T) {
	e := newEnv(t, sim.Options{Seed: 7})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Name: "test", Workflow: "CI",
		Labels: []string{"runs-on=" + sim.RunIDExpr + "/pool=small"}, Duration: 90 * time.Second})
	reg := e.register("r1", "runs-on="+itoa(job.RunID)+"/pool=small")
	e.run(reg)
	e.advance(90 * time.Second)

	got := e.rec.all()
	if len(got) != 3 {
		t.Fatalf("got %d deliveries, want 3", len(got))
	}
	ids := map[string]bool{}
	for i, want := range []string{"queued", "in_progress", "completed"} {
		d := got[i]
		if d.event != sim.EventWorkflowJob || d.action != want || d.status != want || d.jobID != job.ID {
			t.Errorf("delivery %d: event %q action %q status %q job %d, want workflow_job %s for job %d",
				i, d.event, d.action, d.status, d.jobID, want, job.ID)
		}
		if !uuidShape.MatchString(d.id) || ids[d.id] {
			t.Errorf("delivery id %q is not a fresh UUID", d.id)
		}
		ids[d.id] = true
	}

	queued, started, completed := decode(t, got[0].body), decode(t, got[1].body), decode(t, got[2].body)
	wantFields(t, "queued", queued["workflow_job"], map[string]any{
		"status": "queued", "conclusion": nil, "runner_id": nil, "runner_name": nil, "completed_at": nil,
		"created_at": "2025-03-03T09:00:00Z", "steps": []any{},
		"labels": []any{"runs-on=" + itoa(job.RunID) + "/pool=small"},
		"run_id": float64(job.RunID), "id": float64(job.ID), "run_attempt": float64(1),
		"name": "test", "workflow_name": "CI", "head_branch": "main",
	})
	wantFields(t, "in_progress", started["workflow_job"], map[string]any{
		"status": "in_progress", "conclusion": nil, "runner_id": float64(reg.RunnerID), "runner_name": "r1",
		"started_at": "2025-03-03T09:00:00Z", "completed_at": nil,
	})
	wantFields(t, "completed", completed["workflow_job"], map[string]any{
		"status": "completed", "conclusion": "success", "runner_name": "r1", "completed_at": "2025-03-03T09:01:30Z",
	})
	repo := queued["repository"].(map[string]any)
	wantFields(t, "repository", repo, map[string]any{"name": "app", "full_name": "acme/app"})
	wantFields(t, "owner", repo["owner"], map[string]any{"login": "acme"})
	wantFields(t, "sender", queued["sender"], map[string]any{"login": sim.DefaultSender})
}

// TestPayloadsHaveGitHubsShape holds the sim's webhooks against the real
// workflow_job examples: every field of a real workflow_job must be in the
// sim's, with the same JSON kind, and the sim invents no field GitHub lacks.
func TestPayloadsHaveGitHubsShape(t *testing.T) {
	ref := unionOfExamples(t)
	e := newEnv(t, sim.Options{})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Minute})
	e.run(e.register("r1", "linux"))
	e.advance(time.Minute)
	if got := e.rec.actions(job.ID); !slices.Equal(got, []string{"queued", "in_progress", "completed"}) {
		t.Fatalf("actions %v", got)
	}
	for _, d := range e.rec.all() {
		p := decode(t, d.body)
		sameShape(t, d.action, "", ref, p)
		sameStepShape(t, d.action, ref, p)
	}
}

// unionOfExamples merges the real examples' objects key by key, keeping
// for each key a non-null value when any example has one.
func unionOfExamples(t *testing.T) map[string]any {
	t.Helper()
	union := map[string]any{}
	for _, raw := range testfixtures.WorkflowJobExamples(t) {
		var ex map[string]any
		if err := json.Unmarshal(raw, &ex); err != nil {
			t.Fatal(err)
		}
		merge(union, ex)
	}
	return union
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sub, ok := v.(map[string]any); ok {
			d, _ := dst[k].(map[string]any)
			if d == nil {
				d = map[string]any{}
				dst[k] = d
			}
			merge(d, sub)
			continue
		}
		if dst[k] == nil {
			dst[k] = v
		}
	}
}

// sameShape compares the sim's payload p with the real union ref at path: the
// workflow_job object must match key for key; elsewhere (repository, owner,
// sender) the sim may leave fields out but not invent them.
func sameShape(t *testing.T, action, path string, ref, p map[string]any) {
	t.Helper()
	complete := path == ".workflow_job" || path == ""
	for k, rv := range ref {
		pv, ok := p[k]
		if !ok {
			if complete && (path != "" || slices.Contains([]string{"action", "workflow_job", "repository", "sender"}, k)) {
				t.Errorf("%s: field %s%s of GitHub's payload is missing", action, path, "."+k)
			}
			continue
		}
		if rm, ok := rv.(map[string]any); ok {
			pm, ok := pv.(map[string]any)
			if !ok {
				t.Errorf("%s: %s.%s is %T, GitHub sends an object", action, path, k, pv)
				continue
			}
			sameShape(t, action, path+"."+k, rm, pm)
			continue
		}
		if rv != nil && pv != nil && kind(rv) != kind(pv) {
			t.Errorf("%s: %s.%s is a %s, GitHub sends a %s", action, path, k, kind(pv), kind(rv))
		}
	}
	for k := range p {
		if _, ok := ref[k]; !ok {
			t.Errorf("%s: field %s.%s is not in GitHub's payloads", action, path, k)
		}
	}
}

// sameStepShape compares the fields of the sim's steps with a real step's.
func sameStepShape(t *testing.T, action string, ref, p map[string]any) {
	t.Helper()
	refSteps, _ := ref["workflow_job"].(map[string]any)["steps"].([]any)
	steps, _ := p["workflow_job"].(map[string]any)["steps"].([]any)
	if len(refSteps) == 0 {
		t.Fatal("the real examples have no steps")
	}
	want := keys(refSteps[0].(map[string]any))
	for _, s := range steps {
		if got := keys(s.(map[string]any)); !slices.Equal(got, want) {
			t.Errorf("%s: a step has fields %v, GitHub's have %v", action, got, want)
		}
	}
}

func keys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("payload is not JSON: %v", err)
	}
	return m
}

func wantFields(t *testing.T, what string, obj any, want map[string]any) {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Fatalf("%s: not an object: %v", what, obj)
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("%s: no field %q", what, k)
			continue
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(v)
		if string(gb) != string(wb) {
			t.Errorf("%s.%s = %s, want %s", what, k, gb, wb)
		}
	}
}

func TestDeliveryIDsDependOnlyOnTheSeed(t *testing.T) {
	ids := func(seed uint64) []string {
		e := newEnv(t, sim.Options{Seed: seed})
		for range 3 {
			e.gh.QueueJob(sim.JobSpec{Labels: []string{"x"}})
		}
		var out []string
		for _, d := range e.rec.all() {
			out = append(out, d.id)
		}
		return out
	}
	a, b, c := ids(1), ids(1), ids(2)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("seed 1 gave %v then %v; seed 2 gave %v", a, b, c)
	}
}

func TestDroppedDeliveriesLeaveTheJobQueued(t *testing.T) {
	e := newEnv(t, sim.Options{})
	e.gh.DropDeliveries(1)
	lost := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"x"}})
	seen := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"x"}})
	if got := e.rec.all(); len(got) != 1 || got[0].jobID != seen.ID {
		t.Fatalf("deliveries %+v, want only job %d's", got, seen.ID)
	}
	jobs, err := e.gh.QueuedJobs(t.Context(), org)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != lost.ID || jobs[1].ID != seen.ID {
		t.Errorf("QueuedJobs = %+v, want jobs %d and %d", jobs, lost.ID, seen.ID)
	}
	if st := e.gh.Deliveries(); st != (sim.DeliveryStats{Sent: 1, Dropped: 1}) {
		t.Errorf("Deliveries() = %+v", st)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
