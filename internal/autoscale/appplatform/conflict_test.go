package appplatform

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
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

// conflictCase is another writer's change met while scaling 1 → 3.
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
		{
			name: "overridden right after the write",
			arrange: func(r *rig) {
				r.do.AfterPut(r.appID, func(spec map[string]any) {
					addEnv("LOG_LEVEL", "debug")(spec)
					setWorkerField("runner", "instance_count", json.Number("7"))(spec)
				})
			},
			accepted: 2, requests: []string{"GET", "GET", "PUT", "GET", "GET", "PUT", "GET"}, note: "read back instance_count 7, not 3",
		},
	}
}

func TestConcurrentSpecChanges(t *testing.T) {
	for _, c := range conflictCases() {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, fastEnv)
			r.queue(4)
			c.arrange(r)
			rep, err := r.cycle()
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
