package appplatform

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
)

// fastEnv makes a single breach scale: four queued jobs on one instance
// scale up by two at the first poll.
var fastEnv = map[string]string{"BREACH_THRESHOLD": "1"}

func addEnv(key, value string) func(map[string]any) {
	return func(spec map[string]any) {
		for _, w := range spec["workers"].([]any) {
			if m := w.(map[string]any); m["name"] == "runner" {
				m["envs"] = append(m["envs"].([]any), map[string]any{"key": key, "value": value, "scope": "RUN_TIME"})
			}
		}
	}
}

func hasEnv(r *rig, key string) bool {
	envs, _ := r.workerField("runner", "envs").([]any)
	for _, e := range envs {
		if e.(map[string]any)["key"] == key {
			return true
		}
	}
	return false
}

// conflictCase is another writer's change, other than to the worker's
// count, met while scaling 1 → 3.
type conflictCase struct {
	name     string
	arrange  func(r *rig)
	accepted int      // updates accepted
	requests []string // methods in order
	note     string   // in one of the conflicts
}

func conflictCases() []conflictCase {
	return []conflictCase{
		{
			name: "changed between the decision's read and the write",
			arrange: func(r *rig) {
				r.do.AfterGet(r.appID, func(spec map[string]any) {
					addEnv("LOG_LEVEL", "debug")(spec)
					setWorkerField("janitor", "instance_count", json.Number("4"))(spec)
					spec["future_setting"].(map[string]any)["level"] = json.Number("9")
				})
			},
			accepted: 1, requests: []string{"GET", "GET", "PUT", "GET"}, note: "spec changed since it was read",
		},
		{
			name: "refused with 409 after another change",
			arrange: func(r *rig) {
				r.do.AfterGet(r.appID, addEnv("LOG_LEVEL", "debug"))
				r.do.FailNext("PUT", 409, 1)
			},
			accepted: 1, requests: []string{"GET", "GET", "PUT", "GET", "PUT", "GET"}, note: "409 Conflict",
		},
	}
}

func TestConcurrentSpecChanges(t *testing.T) {
	for _, c := range conflictCases() {
		t.Run(c.name, func(t *testing.T) {
			r, rep, err := cycleOnFourJobs(t, fastEnv, c.arrange)
			if err != nil {
				t.Fatalf("cycle: %v", err)
			}
			if !rep.Scaled || rep.New != 3 || r.count() != 3 {
				t.Fatalf("scaled %v to %d; the spec says %d; want 3 (%s)", rep.Scaled, rep.New, r.count(), rep.Decision.Reason)
			}
			if !hasEnv(r, "LOG_LEVEL") {
				t.Fatal("the other writer's change was lost")
			}
			if got := len(r.do.Updates()); got != c.accepted {
				t.Fatalf("%d updates accepted, want %d", got, c.accepted)
			}
			if got := methods(r.do.Requests()); !slices.Equal(got, c.requests) {
				t.Fatalf("requests %v, want %v", got, c.requests)
			}
			if !slices.ContainsFunc(rep.Conflicts, func(s string) bool { return strings.Contains(s, c.note) }) {
				t.Fatalf("conflicts %q lack %q", rep.Conflicts, c.note)
			}
			checkOnlyCountChanged(t, r, 3)
			if !strings.Contains(r.logs.String(), "level=WARN") {
				t.Fatal("the conflict was not logged as a warning")
			}
		})
	}
}

func TestConflictsEveryAttemptSkipsWithoutCooldown(t *testing.T) {
	r := newRig(t, fastEnv)
	r.queue(4)
	r.do.FailNext("PUT", 409, maxScaleAttempts)
	rep, err := r.cycle()
	if !errors.Is(err, ErrConflict) || !IsTransient(err) {
		t.Fatalf("want a transient ErrConflict, got %v", err)
	}
	if rep.Scaled || rep.Skipped == "" || r.count() != 1 {
		t.Fatalf("scaled %v, skipped %q, count %d", rep.Scaled, rep.Skipped, r.count())
	}
	if !strings.Contains(r.logs.String(), "level=WARN msg=\"skipping cycle") {
		t.Fatalf("no warning: %s", r.logs)
	}
	// Nothing was written, so no cooldown started: the next poll, well
	// inside SCALE_UP_COOLDOWN, scales.
	rep, err = r.advanceCycle(10 * time.Second)
	if err != nil || !rep.Scaled || r.count() != 3 {
		t.Fatalf("retry: scaled %v, count %d, err %v (%s)", rep.Scaled, r.count(), err, rep.Decision.Reason)
	}
}

func TestAnotherWriterSetTheSameCount(t *testing.T) {
	r := newRig(t, fastEnv)
	r.queue(4)
	r.do.AfterGet(r.appID, setWorkerField("runner", "instance_count", json.Number("3")))
	rep, err := r.cycle()
	if err != nil || !rep.Scaled || r.count() != 3 {
		t.Fatalf("scaled %v, count %d, err %v", rep.Scaled, r.count(), err)
	}
	if n := len(r.do.Updates()); n != 0 {
		t.Fatalf("%d updates for a count already in place", n)
	}
}

func TestUpdateKeepsSourceVersions(t *testing.T) {
	r := newRig(t, fastEnv)
	r.queue(4)
	if _, err := r.cycle(); err != nil {
		t.Fatal(err)
	}
	checkOnlyCountChanged(t, r, 3)
	if got := r.workerField("runner", "envs").([]any); len(got) != 2 || got[1].(map[string]any)["value"] != "EV[1:encrypted]" {
		t.Fatalf("encrypted secret not written back as read: %v", got)
	}
}

func methods(reqs []string) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i], _, _ = strings.Cut(r, " ")
	}
	return out
}

// Another writer's count always wins over a decision made on the count
// before it: a scale-up from 1 to 3 must not lower the 6 a person has just
// set, nor a read-back showing 7 be overwritten with 3.
func TestAnotherWritersCountWins(t *testing.T) {
	cases := []struct {
		name     string
		arrange  func(r *rig)
		requests []string
		accepted int
		want     int
		skipped  string
	}{
		{
			name: "raised between the decision's read and the write",
			arrange: func(r *rig) {
				r.do.AfterGet(r.appID, func(spec map[string]any) {
					addEnv("LOG_LEVEL", "debug")(spec)
					setWorkerField("runner", "instance_count", json.Number("6"))(spec)
				})
			},
			requests: []string{"GET", "GET"}, accepted: 0, want: 6,
			skipped: "another writer set instance_count 6 after the decision was made on 1; 3 not written",
		},
		{
			name: "overridden right after the write",
			arrange: func(r *rig) {
				r.do.AfterPut(r.appID, setWorkerField("runner", "instance_count", json.Number("7")))
			},
			requests: []string{"GET", "GET", "PUT", "GET"}, accepted: 1, want: 7,
			skipped: "read back instance_count 7, not 3: another writer changed it after our update; left at 7",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, rep, err := cycleOnFourJobs(t, fastEnv, c.arrange)
			if err != nil {
				t.Fatalf("cycle: %v", err)
			}
			if rep.Decision.Action != autoscale.ActionUp || rep.Decision.New != 3 {
				t.Fatalf("decision %+v, want up 1 → 3", rep.Decision)
			}
			if r.count() != c.want || rep.Scaled || rep.New != c.want {
				t.Fatalf("the worker runs %d (report: scaled %v, new %d), want the other writer's %d", r.count(), rep.Scaled, rep.New, c.want)
			}
			if rep.Skipped != c.skipped {
				t.Fatalf("skipped %q, want %q", rep.Skipped, c.skipped)
			}
			if got := methods(r.do.Requests()); !slices.Equal(got, c.requests) {
				t.Fatalf("requests %v, want %v", got, c.requests)
			}
			if got := len(r.do.Updates()); got != c.accepted {
				t.Fatalf("%d updates accepted, want %d", got, c.accepted)
			}
			if got := testutil.ToFloat64(r.scaler.m.superseded); got != 1 {
				t.Fatalf("superseded decisions counted %v, want 1", got)
			}
			if got := testutil.ToFloat64(r.scaler.m.cycles.WithLabelValues("skipped")); got != 1 {
				t.Fatalf("skipped cycles counted %v, want 1", got)
			}
			logs := r.logs.String()
			if !strings.Contains(logs, `level=WARN msg="the worker's count changed under the decision; skipping, the next poll decides"`) ||
				strings.Contains(logs, `msg="scaled worker"`) {
				t.Fatalf("logs:\n%s", logs)
			}
		})
	}
}

// A decision left unapplied starts no cooldown: the next poll decides on
// the count another writer set, at once.
func TestASupersededDecisionStartsNoCooldown(t *testing.T) {
	r := newRig(t, fastEnv)
	r.queue(4)
	r.do.AfterGet(r.appID, setWorkerField("runner", "instance_count", json.Number("2")))
	rep, err := r.cycle()
	if err != nil || rep.Scaled || r.count() != 2 {
		t.Fatalf("scaled %v, count %d, err %v", rep.Scaled, r.count(), err)
	}
	// Inside SCALE_UP_COOLDOWN (60 s): 4 jobs on 2 instances breach up.
	rep, err = r.advanceCycle(10 * time.Second)
	if err != nil || !rep.Scaled || rep.Current != 2 || r.count() != 3 {
		t.Fatalf("next poll: scaled %v from %d to %d, err %v (%s)", rep.Scaled, rep.Current, r.count(), err, rep.Decision.Reason)
	}
}
