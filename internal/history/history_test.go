package history_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	"github.com/bullpen-ci/bullpen/internal/history"
)

// oneRun is a GitHub that holds one run, of the jobs given.
type oneRun struct{ jobs []rest.PastJob }

func (s oneRun) RunsSince(context.Context, string, time.Time) ([]int64, error) {
	return []int64{7}, nil
}
func (s oneRun) RunHistory(context.Context, string, int64) ([]rest.PastJob, error) {
	return s.jobs, nil
}
func (s oneRun) OrgRepositories(context.Context, string) ([]string, error) { return nil, nil }

func pastJob(id int64, name string, created time.Time) rest.PastJob {
	return rest.PastJob{ID: id, RunID: 7, RunAttempt: 1, Repo: "acme/app", Workflow: "ci", Name: name,
		Labels: []string{"runs-on=7/pool=small-x64"}, Status: "completed", Conclusion: "success", RunnerName: "r",
		CreatedAt: created, StartedAt: created.Add(5 * time.Second), CompletedAt: created.Add(time.Minute)}
}

// Every line an export writes reads back: a skipped job (no runs-on
// evaluated, no labels) is written, a start stamped 2s before the queueing
// is taken as the queueing, and a job no history can hold is left out and
// counted, not written for the reader to refuse.
func TestExportWritesOnlyWhatReadTakes(t *testing.T) {
	ran := pastJob(1, "build", t0)
	skipped := pastJob(2, "deploy", t0.Add(time.Minute))
	skipped.Labels, skipped.Conclusion, skipped.RunnerName = []string{}, "skipped", ""
	skipped.StartedAt, skipped.CompletedAt = time.Time{}, skipped.CreatedAt
	skewed := pastJob(3, "lint", t0.Add(2*time.Minute))
	skewed.StartedAt = skewed.CreatedAt.Add(-2 * time.Second)
	skewed.CompletedAt = skewed.CreatedAt.Add(-time.Second)
	unlabelled := pastJob(4, "test", t0.Add(3*time.Minute))
	unlabelled.Labels = nil
	broken := pastJob(5, "e2e", t0.Add(4*time.Minute))
	broken.StartedAt = broken.CreatedAt.Add(-time.Hour)

	var out bytes.Buffer
	x := &history.Export{Source: oneRun{[]rest.PastJob{ran, skipped, skewed, unlabelled, broken}}, Clock: clock.NewVirtual(t0), Out: &out}
	p, err := x.Repos(context.Background(), []string{"acme/app"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Written != 3 || p.Refused != 2 || p.Jobs != 5 || !strings.Contains(p.Refusal, "job 5 of run 7 of acme/app: started_at before created_at by 1h0m0s") {
		t.Errorf("progress %+v; want 3 written, 2 refused, the last refusal job 5's", p)
	}
	jobs, err := history.Read("history.jsonl", bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("the export's own file is refused: %v\n%s", err, out.String())
	}
	if len(jobs) != 3 || jobs[0].ID != 1 || jobs[1].ID != 2 || jobs[2].ID != 3 {
		t.Fatalf("read back %+v; want jobs 1, 2 and 3", jobs)
	}
	if _, ok := jobs[1].QueueTime(); ok {
		t.Errorf("the skipped job has a queue time: %+v", jobs[1])
	}
	if q, ok := jobs[2].QueueTime(); !ok || q != 0 || !jobs[2].Completed.Equal(skewed.CreatedAt) {
		t.Errorf("the skewed job waited %s (%t), completed %v; want 0s, completed when queued", q, ok, jobs[2].Completed)
	}
	// A resumed export takes the file and writes nothing again.
	again := &history.Export{Source: oneRun{[]rest.PastJob{ran, skipped, skewed, unlabelled, broken}}, Clock: clock.NewVirtual(t0), Out: &out, Have: jobs}
	if p, err := again.Repos(context.Background(), []string{"acme/app"}); err != nil || p.Written != 0 || p.Skipped != 1 {
		t.Errorf("resumed: %+v, %v; want the run skipped", p, err)
	}
}

// Read applies the export's rule: no labels only for a job the record shows
// never ran, a start up to history.ClockSkew before the queueing taken as
// the queueing, a larger gap refused.
func TestReadTakesJobsThatNeverRanAndClockSkew(t *testing.T) {
	in := `{"id":1,"repository":"acme/app","labels":[],"created_at":"2026-11-16T09:00:00Z","completed_at":"2026-11-16T09:00:00Z","conclusion":"skipped"}
{"id":2,"repository":"acme/app","labels":[],"created_at":"2026-11-16T09:00:00Z","completed_at":"2026-11-16T09:03:00Z","conclusion":"cancelled"}
{"id":3,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:00:05Z","started_at":"2026-11-16T09:00:00Z","completed_at":"2026-11-16T09:01:00Z","conclusion":"success"}
{"id":4,"repository":"acme/app","labels":[],"created_at":"2026-11-16T09:00:00Z","started_at":"2026-11-16T09:00:01Z","completed_at":"2026-11-16T09:01:00Z","conclusion":"skipped"}
{"id":5,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:00:06Z","started_at":"2026-11-16T09:00:00Z","conclusion":"success"}
`
	jobs, err := history.Read("h.jsonl", strings.NewReader(in))
	if len(jobs) != 3 {
		t.Errorf("%d jobs, want 3: %+v", len(jobs), jobs)
	}
	for _, want := range []string{"h.jsonl:4: no labels", "h.jsonl:5: started_at before created_at by 6s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "h.jsonl:3") {
		t.Errorf("a start 5s before the queueing is refused: %v", err)
	}
	if len(jobs) == 3 {
		if q, ok := jobs[2].QueueTime(); !ok || q != 0 {
			t.Errorf("job 3 waited %s (%t), want 0s", q, ok)
		}
	}
}
