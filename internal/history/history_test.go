package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// A job twice, as in two overlapping exports concatenated, is queued once:
// the same line again is dropped and counted; a different record of the
// same id is refused, both lines named.
func TestReadDropsRepeatedJobsAndRefusesConflictingOnes(t *testing.T) {
	var one bytes.Buffer
	for id := range int64(60) {
		fmt.Fprintf(&one, `{"id":%d,"run_id":%d,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:%02d:00Z","started_at":"2026-11-16T09:%02d:03Z","completed_at":"2026-11-16T09:%02d:50Z","conclusion":"success"}`+"\n",
			id+1, 100+id, id, id, id)
	}
	twice := append(bytes.Clone(one.Bytes()), one.Bytes()...)
	c, err := history.ReadContents("h.jsonl", bytes.NewReader(twice))
	if err != nil || len(c.Jobs) != 60 || c.Duplicates != 60 {
		t.Fatalf("cat h h: %d jobs, %d duplicates (%v); want 60 and 60", len(c.Jobs), c.Duplicates, err)
	}
	if jobs, err := history.Read("h.jsonl", bytes.NewReader(twice)); err != nil || len(jobs) != 60 {
		t.Errorf("Read: %d jobs (%v), want 60", len(jobs), err)
	}
	conflicting := one.String() + `{"id":7,"run_id":106,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:06:00Z","started_at":"2026-11-16T09:06:03Z","completed_at":"2026-11-16T09:09:50Z","conclusion":"failure"}` + "\n"
	c, err = history.ReadContents("h.jsonl", strings.NewReader(conflicting))
	if want := "h.jsonl:61: job 7 again, unlike line 7"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v lacks %q", err, want)
	}
	if len(c.Jobs) != 60 || c.Duplicates != 0 {
		t.Errorf("%d jobs, %d duplicates; want the first 60, none dropped", len(c.Jobs), c.Duplicates)
	}
}

// A file of GitHub's own job objects gets ten line errors, a count of the
// rest, and what to run instead, not one error per line.
func TestReadOfGitHubsJobsSaysToExport(t *testing.T) {
	var in strings.Builder
	for id := range 5000 {
		fmt.Fprintf(&in, `{"id":%d,"run_id":9,"workflow_name":"CI","head_sha":"abc","run_url":"https://api.github.com/repos/acme/app/actions/runs/9","status":"completed","conclusion":"success","created_at":"2026-11-16T09:00:00Z","labels":["linux"]}`+"\n", id+1)
	}
	_, err := history.Read("jobs.json", strings.NewReader(in.String()))
	if err == nil {
		t.Fatal("GitHub's job objects read as a history")
	}
	msg := err.Error()
	if n := strings.Count(msg, "not a job"); n != 10 {
		t.Errorf("%d line errors, want 10", n)
	}
	for _, want := range []string{"jobs.json:1: not a job", "jobs.json:10: not a job", "jobs.json: 4990 more bad lines", "bullpen history export"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if len(msg) > 4000 {
		t.Errorf("the error is %d bytes", len(msg))
	}
	var le *history.LineError
	if !errors.As(err, &le) || le.Line != 1 {
		t.Errorf("the first line error is not line 1's: %v", le)
	}
	// A history's own bad lines get no such advice.
	_, err = history.Read("h.jsonl", strings.NewReader(`{"id":1,"repository":"acme/app","surprise":1}`+"\n"))
	if err == nil || strings.Contains(err.Error(), "history export") {
		t.Errorf("a history's bad line: %v", err)
	}
}
