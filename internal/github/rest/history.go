package rest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-github/v88/github"
)

// PastJob is a workflow job as its history records it: when it was
// queued, started and completed, and where it ran.
type PastJob struct {
	ID, RunID   int64
	RunAttempt  int
	Repo        string // owner/name
	Workflow    string
	Name        string
	Labels      []string
	Status      string
	Conclusion  string
	RunnerName  string
	RunnerGroup string
	CreatedAt   time.Time
	StartedAt   time.Time // zero until it started
	CompletedAt time.Time // zero until it completed
}

// searchCap is how many workflow runs GitHub finds at most for a listing
// filtered by created (or status, actor, branch...): past it, the pages
// end as if there were no more.
const searchCap = 1000

// errSearchCapped: a listing's total reached searchCap, so it may miss
// runs; its window must be split.
var errSearchCapped = errors.New("GitHub found as many runs as it lists")

// RunsSince lists the ids of a repository's workflow runs created at or
// after since (to the second), newest first, all pages. A window in which
// GitHub finds 1,000 runs or more is read as smaller ones, halved until
// each holds fewer, since GitHub lists no more than that of one search.
func (c *Client) RunsSince(ctx context.Context, repo string, since time.Time) ([]int64, error) {
	since = since.Truncate(time.Second)
	op := fmt.Sprintf("list the runs of %s since %s", repo, since.UTC().Format(time.RFC3339))
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return nil, err
	}
	runs, newest, err := c.runsCreated(ctx, owner, name, ">="+since.UTC().Format(time.RFC3339))
	if errors.Is(err, errSearchCapped) {
		runs, err = c.runsBetween(ctx, owner, name, since, newest)
	}
	if err != nil {
		return nil, c.classify(op, err, nil)
	}
	ids := make([]int64, 0, len(runs))
	seen := make(map[int64]bool, len(runs))
	for _, r := range runs {
		if !seen[r.GetID()] { // a run created while the pages are read shifts the later ones
			seen[r.GetID()] = true
			ids = append(ids, r.GetID())
		}
	}
	return ids, nil
}

// runsBetween lists the runs created from from to to, both included, to
// the second, newest first: one listing when GitHub finds fewer than
// searchCap of them, else the newer half's then the older half's.
func (c *Client) runsBetween(ctx context.Context, owner, name string, from, to time.Time) ([]*github.WorkflowRun, error) {
	runs, _, err := c.runsCreated(ctx, owner, name, from.UTC().Format(time.RFC3339)+".."+to.UTC().Format(time.RFC3339))
	if !errors.Is(err, errSearchCapped) {
		return runs, err
	}
	if !to.After(from) {
		return nil, fmt.Errorf("%d runs or more created at %s, within one second: GitHub lists no more of one search, so some would be missing",
			searchCap, from.UTC().Format(time.RFC3339))
	}
	mid := from.Add(to.Sub(from) / 2).Truncate(time.Second)
	newer, err := c.runsBetween(ctx, owner, name, mid.Add(time.Second), to)
	if err != nil {
		return nil, err
	}
	older, err := c.runsBetween(ctx, owner, name, from, mid)
	return append(newer, older...), err
}

// runsCreated lists the runs whose creation matches created (GitHub's
// date syntax), all pages; or, when the first page says GitHub found
// searchCap runs or more, errSearchCapped with the newest creation time on
// that page, which is the newest of all: GitHub lists runs newest first.
func (c *Client) runsCreated(ctx context.Context, owner, name, created string) ([]*github.WorkflowRun, time.Time, error) {
	var newest time.Time
	runs, err := collect(ctx, func(page int) ([]*github.WorkflowRun, *github.Response, error) {
		rs, resp, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, name, &github.ListWorkflowRunsOptions{
			Created: created, ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
		if err == nil && page == 0 && rs.GetTotalCount() >= searchCap {
			for _, r := range rs.WorkflowRuns {
				newest = latest(newest, r.GetCreatedAt().Time.Truncate(time.Second))
			}
			err = errSearchCapped
		}
		return rs.GetWorkflowRuns(), resp, err
	})
	return runs, newest, err
}

// RunHistory lists every job of every attempt of a run, all pages.
func (c *Client) RunHistory(ctx context.Context, repo string, runID int64) ([]PastJob, error) {
	op := fmt.Sprintf("list the jobs of run %d of %s", runID, repo)
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return nil, err
	}
	jobs, err := collect(ctx, func(page int) ([]*github.WorkflowJob, *github.Response, error) {
		js, resp, err := c.gh.Actions.ListWorkflowJobs(ctx, owner, name, runID, &github.ListWorkflowJobsOptions{
			Filter: "all", ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
		return js.GetJobs(), resp, err
	})
	if err != nil {
		return nil, c.classify(op, err, nil)
	}
	out := make([]PastJob, 0, len(jobs))
	for _, j := range jobs {
		p := PastJob{ID: j.GetID(), RunID: j.GetRunID(), RunAttempt: int(j.GetRunAttempt()), Repo: repo,
			Workflow: j.GetWorkflowName(), Name: j.GetName(), Labels: j.Labels, Status: j.GetStatus(),
			Conclusion: j.GetConclusion(), RunnerName: j.GetRunnerName(), RunnerGroup: j.GetRunnerGroupName(),
			CreatedAt: j.GetCreatedAt().Time, CompletedAt: j.GetCompletedAt().Time}
		// GitHub reports a job that never started (queued, or cancelled
		// while queued) as started when it was created: only a job a
		// runner took has started.
		if p.RunnerName != "" {
			p.StartedAt = j.GetStartedAt().Time
		}
		out = append(out, p)
	}
	return out, nil
}

// OrgRepositories lists an organisation's repositories that can run
// workflows (not archived, not disabled), as owner/name, all pages.
func (c *Client) OrgRepositories(ctx context.Context, org string) ([]string, error) {
	repos, err := collect(ctx, func(page int) ([]*github.Repository, *github.Response, error) {
		return c.gh.Repositories.ListByOrg(ctx, org, &github.RepositoryListByOrgOptions{
			ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
	})
	if err != nil {
		return nil, c.classify("list the repositories of "+org, err, nil)
	}
	var out []string
	for _, r := range repos {
		if !r.GetArchived() && !r.GetDisabled() {
			out = append(out, r.GetFullName())
		}
	}
	return out, nil
}
