package rest

import (
	"context"
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

// RunsSince lists the ids of a repository's workflow runs created at or
// after since, newest first, all pages.
func (c *Client) RunsSince(ctx context.Context, repo string, since time.Time) ([]int64, error) {
	op := fmt.Sprintf("list the runs of %s since %s", repo, since.UTC().Format(time.RFC3339))
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return nil, err
	}
	runs, err := collect(ctx, func(page int) ([]*github.WorkflowRun, *github.Response, error) {
		rs, resp, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, name, &github.ListWorkflowRunsOptions{
			Created: ">=" + since.UTC().Format(time.RFC3339), ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
		return rs.GetWorkflowRuns(), resp, err
	})
	if err != nil {
		return nil, c.classify(op, err, nil)
	}
	ids := make([]int64, 0, len(runs))
	for _, r := range runs {
		ids = append(ids, r.GetID())
	}
	return ids, nil
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

// OwnWaits returns ctx unchanged.
//
// Deprecated: the client never holds calls back after a rate limit, so a
// caller that waits limits out itself needs no mark; drop the call.
func OwnWaits(ctx context.Context) context.Context { return ctx }
