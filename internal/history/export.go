package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// Source is what an export reads of GitHub (the REST client).
type Source interface {
	RunsSince(ctx context.Context, repo string, since time.Time) ([]int64, error)
	RunHistory(ctx context.Context, repo string, runID int64) ([]rest.PastJob, error)
	OrgRepositories(ctx context.Context, org string) ([]string, error)
}

// Progress is how far an export has come.
type Progress struct {
	Repo             string // the repository being read
	ReposDone, Repos int
	// Runs are the runs listed so far; Skipped those of them already in
	// the file, whose jobs are not read again, and Unfinished those with
	// a job not completed yet, none of whose jobs is written.
	Runs, Skipped, Unfinished int
	// Jobs are the jobs of the runs listed, read or already in the file:
	// Written now, Known already in the file, Open in the unfinished
	// runs, left for a later export; Refused those a history file cannot
	// hold (Job.Usable), not written, so that every line written reads
	// back, and Refusal the newest one's reason.
	Jobs, Written, Known, Open, Refused int
	Refusal                             string
	// WaitingUntil is set while a rate limit holds WaitingFor back.
	WaitingUntil   time.Time
	WaitingFor     string
	RateLimitWaits int
}

// Export writes the jobs of repositories' workflow runs created since
// Since to Out, one JSON line each, a run's jobs once all of them have
// completed: a run in progress is left for a later export. A resumed
// export (Have) does not read again the jobs of the runs the file holds,
// which were complete when written, and so spends its API budget on the
// runs still missing. A rate limit holds the export back for the time
// GitHub asks, at most MaxWaits times in a row per call; nothing is
// skipped.
type Export struct {
	Source Source
	Clock  domain.Clock
	Since  time.Time
	Out    io.Writer
	// Have is the jobs the file already holds. A run re-run after it was
	// written is not read again: its new attempt's jobs are left out.
	Have []Job
	// OnProgress, when set, is told after every run and every wait.
	OnProgress func(Progress)
	// MaxWaits bounds the waits of one call for rate limits; default 10.
	MaxWaits int

	progress Progress
	// inFile counts the file's jobs by run; known are their ids. Both
	// are built from Have at the first repository.
	inFile map[runKey]int
	known  map[int64]bool
}

// runKey is a run of a repository: a file may hold several repositories'
// runs.
type runKey struct {
	repo string // lower case: GitHub's names are case-insensitive
	run  int64
}

func keyOf(repo string, run int64) runKey { return runKey{strings.ToLower(repo), run} }

// Org exports every repository of an organisation that can run workflows.
func (e *Export) Org(ctx context.Context, org string) (Progress, error) {
	var repos []string
	err := e.retry(ctx, "list the repositories of "+org, func() (err error) {
		repos, err = e.Source.OrgRepositories(ctx, org)
		return err
	})
	if err != nil {
		return e.progress, err
	}
	return e.Repos(ctx, repos)
}

// Repos exports the repositories (owner/name) in turn.
func (e *Export) Repos(ctx context.Context, repos []string) (Progress, error) {
	if e.inFile == nil {
		e.inFile, e.known = map[runKey]int{}, map[int64]bool{}
		for _, j := range e.Have {
			e.inFile[keyOf(j.Repo, j.RunID)]++
			e.known[j.ID] = true
		}
	}
	e.progress.Repos = len(repos)
	for _, repo := range repos {
		e.progress.Repo = repo
		if err := e.repo(ctx, repo); err != nil {
			return e.progress, err
		}
		e.progress.ReposDone++
		e.report()
	}
	return e.progress, nil
}

func (e *Export) repo(ctx context.Context, repo string) error {
	var runs []int64
	if err := e.retry(ctx, "list the runs of "+repo, func() (err error) {
		runs, err = e.Source.RunsSince(ctx, repo, e.Since)
		return err
	}); err != nil {
		return err
	}
	// Oldest first, so that an interrupted export has written the runs
	// it got to.
	for i := len(runs) - 1; i >= 0; i-- {
		e.progress.Runs++
		if n := e.inFile[keyOf(repo, runs[i])]; n > 0 {
			e.progress.Skipped++
			e.progress.Jobs += n
			e.progress.Known += n
			e.report()
			continue
		}
		var jobs []rest.PastJob
		if err := e.retry(ctx, fmt.Sprintf("list the jobs of run %d of %s", runs[i], repo), func() (err error) {
			jobs, err = e.Source.RunHistory(ctx, repo, runs[i])
			return err
		}); err != nil {
			return err
		}
		if err := e.write(jobs); err != nil {
			return err
		}
		e.report()
	}
	return nil
}

// write writes a run's jobs, unless one of them is not completed: then
// none, so that every run the file holds is complete there.
func (e *Export) write(jobs []rest.PastJob) error {
	e.progress.Jobs += len(jobs)
	for _, p := range jobs {
		if p.Status != "completed" {
			e.progress.Open += len(jobs)
			e.progress.Unfinished++
			return nil
		}
	}
	// The run's lines go out in one write, so that an export stopped
	// while writing hardly ever leaves part of a run, which a resumed
	// export would take for the whole of it.
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	var written []rest.PastJob
	for _, p := range jobs {
		if e.known[p.ID] {
			e.progress.Known++
			continue
		}
		j, err := lineOf(p).Usable()
		if err != nil {
			e.progress.Refused++
			e.progress.Refusal = fmt.Sprintf("job %d of run %d of %s: %v", p.ID, p.RunID, p.Repo, err)
			continue
		}
		if err := enc.Encode(j); err != nil {
			return fmt.Errorf("write job %d: %w", p.ID, err)
		}
		written = append(written, p)
	}
	if len(written) == 0 {
		return nil
	}
	if _, err := e.Out.Write(lines.Bytes()); err != nil {
		return fmt.Errorf("write the jobs of run %d: %w", written[0].RunID, err)
	}
	for _, p := range written {
		e.known[p.ID] = true
		e.inFile[keyOf(p.Repo, p.RunID)]++
	}
	e.progress.Written += len(written)
	return nil
}

func lineOf(p rest.PastJob) Job {
	j := Job{ID: p.ID, RunID: p.RunID, RunAttempt: p.RunAttempt, Repo: p.Repo, Workflow: p.Workflow, Name: p.Name,
		Labels: p.Labels, Created: p.CreatedAt.UTC(), Conclusion: p.Conclusion, RunnerName: p.RunnerName, RunnerGroup: p.RunnerGroup}
	if !p.StartedAt.IsZero() {
		t := p.StartedAt.UTC()
		j.Started = &t
	}
	if !p.CompletedAt.IsZero() {
		t := p.CompletedAt.UTC()
		j.Completed = &t
	}
	return j
}

// retry makes call, waiting out the rate limits it meets.
func (e *Export) retry(ctx context.Context, what string, call func() error) error {
	maxWaits := e.MaxWaits
	if maxWaits <= 0 {
		maxWaits = 10
	}
	for waits := 0; ; waits++ {
		err := call()
		var limited interface{ RetryAt() time.Time }
		if err == nil || !errors.As(err, &limited) {
			return err
		}
		if waits == maxWaits {
			return fmt.Errorf("%s: still rate limited after %d waits: %w", what, waits, err)
		}
		until := limited.RetryAt()
		wait := max(until.Sub(e.Clock.Now()), time.Second)
		e.progress.WaitingUntil, e.progress.WaitingFor = e.Clock.Now().Add(wait), what
		e.progress.RateLimitWaits++
		over := e.Clock.After(wait)
		e.report() // once the wait is set: whoever drives the clock may move it now
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-over:
		}
		e.progress.WaitingUntil, e.progress.WaitingFor = time.Time{}, ""
	}
}

func (e *Export) report() {
	if e.OnProgress != nil {
		e.OnProgress(e.progress)
	}
}
