package history_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	"github.com/bullpen-ci/bullpen/internal/history"
)

const token = "ghp_historyExport0123456789"

var t0 = time.Date(2026, 11, 16, 9, 0, 0, 0, time.UTC)

// world is a fake GitHub with a history, on a virtual clock, and a client.
type world struct {
	t   *testing.T
	gh  *fakegh.Server
	clk *clock.Virtual
	c   *rest.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, gh: fakegh.New(), clk: clock.NewVirtual(t0)}
	t.Cleanup(w.gh.Close)
	w.gh.SetClock(w.clk)
	w.gh.RequireToken(token)
	c, err := rest.New(rest.Options{BaseURL: w.gh.URL(), Token: token, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	w.c = c
	return w
}

// ran queues a job in repo, a runner takes it after wait and it ends after
// took; it returns the job's id.
func (w *world) ran(repo string, wait, took time.Duration, opts ...fakegh.JobOption) int64 {
	w.t.Helper()
	j := w.gh.QueueJob(repo, []string{"linux", "x64"}, opts...)
	w.clk.Advance(wait)
	if err := w.gh.StartJob(j.ID, "runner-1"); err != nil {
		w.t.Fatal(err)
	}
	w.clk.Advance(took)
	if err := w.gh.CompleteJob(j.ID, "success"); err != nil {
		w.t.Fatal(err)
	}
	return j.ID
}

func (w *world) export(out *bytes.Buffer, have []history.Job, repos ...string) (history.Progress, error) {
	e := &history.Export{Source: w.c, Clock: w.clk, Since: t0, Out: out, Have: have}
	return e.Repos(context.Background(), repos)
}

// An export pages through runs and jobs and writes each completed job once,
// with its times; a job still queued is left for a later export.
func TestExportPagesAndWritesCompletedJobs(t *testing.T) {
	w := newWorld(t)
	w.gh.PageSize(2)
	var ids []int64
	for range 5 {
		ids = append(ids, w.ran("acme/app", 3*time.Second, time.Minute))
	}
	first := w.gh.QueueJob("acme/app", []string{"linux"})
	w.gh.QueueJob("acme/app", []string{"linux"}, fakegh.InRun(first.RunID)) // same run, still queued
	var out bytes.Buffer
	p, err := w.export(&out, nil, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := history.Read("export", &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 5 || p.Written != 5 || p.Open != 2 {
		t.Fatalf("%d jobs read back, progress %+v; want the 5 completed ones, 2 open", len(jobs), p)
	}
	for i, j := range jobs {
		if j.ID != ids[i] {
			t.Errorf("line %d is job %d, want %d (oldest first)", i+1, j.ID, ids[i])
		}
		if q, ok := j.QueueTime(); !ok || q != 3*time.Second {
			t.Errorf("job %d waited %s (%t), want 3s", j.ID, q, ok)
		}
		if j.Completed == nil || j.Completed.Sub(*j.Started) != time.Minute || j.Conclusion != "success" || j.RunnerName != "runner-1" {
			t.Errorf("job %d: %+v", j.ID, j)
		}
	}
	if n := w.gh.Count("GET /repos/{owner}/{repo}/actions/runs"); n < 3 {
		t.Errorf("runs listed in %d pages, want at least 3 of 2", n)
	}
}

// A secondary rate limit holds the export back for the time GitHub asks;
// nothing is lost.
func TestExportWaitsOutARateLimit(t *testing.T) {
	w := newWorld(t)
	w.ran("acme/app", time.Second, time.Minute)
	w.ran("acme/app", time.Second, time.Minute)
	w.gh.SecondaryRetryAfter(90 * time.Second)
	w.gh.FailNext("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs", http.StatusTooManyRequests, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	waits := make(chan history.Progress, 10)
	e := &history.Export{Source: w.c, Clock: w.clk, Since: t0, Out: &out, OnProgress: func(p history.Progress) {
		if !p.WaitingUntil.IsZero() {
			waits <- p
		}
	}}
	start := w.clk.Now()
	go func() { _, err := e.Repos(context.Background(), []string{"acme/app"}); done <- err }()
	wait := <-waits
	if wait.WaitingUntil.Sub(start) != 90*time.Second || !strings.Contains(wait.WaitingFor, "jobs of run") {
		t.Fatalf("wait reported: %+v", wait)
	}
	w.clk.AdvanceTo(wait.WaitingUntil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(waits) != 0 {
		t.Fatalf("%d more waits", len(waits))
	}
	if jobs, err := history.Read("export", &out); err != nil || len(jobs) != 2 {
		t.Fatalf("%d jobs after the wait (%v), want 2", len(jobs), err)
	}
}

// An export stopped half-way resumes: the jobs already written are not
// written again, the others are.
func TestExportResumes(t *testing.T) {
	w := newWorld(t)
	for range 4 {
		w.ran("acme/app", time.Second, time.Minute)
	}
	var out bytes.Buffer
	if _, err := w.export(&out, nil, "acme/app"); err != nil {
		t.Fatal(err)
	}
	written := bytes.Clone(out.Bytes())
	all, _ := history.Read("export", &out)
	half := bytes.Join(bytes.SplitAfter(written, []byte("\n"))[:2], nil)
	kept, err := history.Read("half", bytes.NewReader(half))
	if err != nil || len(kept) != 2 {
		t.Fatalf("half the file: %d jobs, %v", len(kept), err)
	}
	resumed := bytes.NewBuffer(half)
	p, err := w.export(resumed, kept, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	got, err := history.Read("resumed", resumed)
	if err != nil || len(got) != len(all) || p.Known != 2 || p.Written != 2 {
		t.Fatalf("resumed: %d jobs (%v), progress %+v; want %d, 2 known, 2 written", len(got), err, p, len(all))
	}
}

// A resumed export does not read again the jobs of the runs the file
// holds, which it writes only once every job of theirs has completed; a
// run in progress is read again, and written whole once it is complete.
func TestAResumedExportSkipsTheRunsInTheFile(t *testing.T) {
	w := newWorld(t)
	for range 3 {
		w.ran("acme/app", time.Second, time.Minute)
	}
	done := w.gh.QueueJob("acme/app", []string{"linux"})
	open := w.gh.QueueJob("acme/app", []string{"linux"}, fakegh.InRun(done.RunID))
	if err := w.gh.StartJob(done.ID, "runner-2"); err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(time.Minute)
	if err := w.gh.CompleteJob(done.ID, "success"); err != nil {
		t.Fatal(err)
	}
	const jobsOfARun = "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
	var out bytes.Buffer
	p, err := w.export(&out, nil, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := history.Read("export", bytes.NewReader(out.Bytes()))
	if len(first) != 3 || p.Written != 3 || p.Unfinished != 1 || p.Open != 2 || p.Runs != 4 {
		t.Fatalf("first export: %d jobs in the file, progress %+v; want the 3 complete runs' jobs, the fourth run left", len(first), p)
	}
	if err := w.gh.StartJob(open.ID, "runner-3"); err != nil {
		t.Fatal(err)
	}
	if err := w.gh.CompleteJob(open.ID, "success"); err != nil {
		t.Fatal(err)
	}
	read := w.gh.Count(jobsOfARun)
	p, err = w.export(&out, first, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	if n := w.gh.Count(jobsOfARun) - read; n != 1 || p.Skipped != 3 || p.Known != 3 || p.Written != 2 || p.Runs != 4 {
		t.Errorf("resumed: the jobs of %d runs read, progress %+v; want the one that was in progress, 3 skipped, its 2 jobs written", n, p)
	}
	all, err := history.Read("resumed", &out)
	if err != nil || len(all) != 5 {
		t.Fatalf("resumed: %d jobs in the file (%v), want 5", len(all), err)
	}
	if all[3].RunID != done.RunID || all[4].RunID != done.RunID {
		t.Errorf("the last lines are of runs %d and %d, want %d's two jobs", all[3].RunID, all[4].RunID, done.RunID)
	}
}

// An organisation's export reads each of its repositories.
func TestExportOrganisation(t *testing.T) {
	w := newWorld(t)
	w.ran("acme/app", time.Second, time.Minute)
	w.ran("acme/lib", time.Second, time.Minute)
	w.ran("globex/other", time.Second, time.Minute)
	var out bytes.Buffer
	e := &history.Export{Source: w.c, Clock: w.clk, Since: t0, Out: &out}
	p, err := e.Org(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := history.Read("export", &out)
	if p.Repos != 2 || len(jobs) != 2 {
		t.Fatalf("%d repositories, %d jobs; want acme's 2 and 2", p.Repos, len(jobs))
	}
}

// Bad lines are reported with their numbers, every one.
func TestReadNamesBadLines(t *testing.T) {
	in := `{"id":1,"run_id":1,"run_attempt":1,"repository":"acme/app","workflow":"CI","name":"build","labels":["linux"],"created_at":"2026-11-16T09:00:00Z"}

{"id":2,"repository":"acme","labels":[],"created_at":"2026-11-16T09:00:00Z"}
not json
{"id":3,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:00:00Z","started_at":"2026-11-16T08:00:00Z"}
{"id":4,"repository":"acme/app","labels":["linux"],"created_at":"2026-11-16T09:00:00Z","surprise":1}
`
	jobs, err := history.Read("jobs.jsonl", strings.NewReader(in))
	if len(jobs) != 1 {
		t.Errorf("%d good jobs, want 1", len(jobs))
	}
	for _, want := range []string{
		`jobs.jsonl:3: repository "acme" is not owner/name; no labels`,
		"jobs.jsonl:4: not a job",
		"jobs.jsonl:5: started_at before created_at",
		`jobs.jsonl:6: not a job: json: unknown field "surprise"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	var le *history.LineError
	if !errors.As(err, &le) {
		t.Errorf("the error is no LineError: %T", err)
	}
}
