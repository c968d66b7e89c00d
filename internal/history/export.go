package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Repo                 string // the repository being read
	ReposDone, Repos     int
	Runs, Jobs           int // read so far
	Written, Known, Open int // jobs written, already in the file, not completed yet
	// WaitingUntil is set while a rate limit holds WaitingFor back.
	WaitingUntil   time.Time
	WaitingFor     string
	RateLimitWaits int
}

// Export writes the completed jobs of repositories' workflow runs created
// since Since to Out, one JSON line each, skipping those in Have (a
// resumed export). A rate limit holds the export back for the time GitHub
// asks, at most MaxWaits times in a row per call; nothing is skipped.
type Export struct {
	Source Source
	Clock  domain.Clock
	Since  time.Time
	Out    io.Writer
	Have   map[int64]bool
	// OnProgress, when set, is told after every run and every wait.
	OnProgress func(Progress)
	// MaxWaits bounds the waits of one call for rate limits; default 10.
	MaxWaits int

	progress Progress
}

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
	// Oldest first, so that an interrupted export resumes where it stopped.
	for i := len(runs) - 1; i >= 0; i-- {
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
		e.progress.Runs++
		e.report()
	}
	return nil
}

func (e *Export) write(jobs []rest.PastJob) error {
	enc := json.NewEncoder(e.Out)
	for _, p := range jobs {
		e.progress.Jobs++
		switch {
		case e.Have[p.ID]:
			e.progress.Known++
			continue
		case p.Status != "completed":
			e.progress.Open++
			continue
		}
		if err := enc.Encode(lineOf(p)); err != nil {
			return fmt.Errorf("write job %d: %w", p.ID, err)
		}
		if e.Have == nil {
			e.Have = map[int64]bool{}
		}
		e.Have[p.ID] = true
		e.progress.Written++
	}
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
