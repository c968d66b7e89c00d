package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-github/v88/github"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Job statuses ListJobs accepts.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
)

// runStatuses are the run statuses whose runs may hold jobs of a status. A
// run is in progress as soon as one of its jobs is, so its other jobs may
// still be queued.
var runStatuses = map[string][]string{
	// A run waiting for an environment's approval may hold queued jobs too.
	StatusQueued:     {StatusQueued, StatusInProgress, "waiting"},
	StatusInProgress: {StatusInProgress},
}

// ListJobs lists the scope's workflow jobs with this status (StatusQueued
// or StatusInProgress), each once. For a repository it lists the workflow
// runs that may hold such jobs, then their jobs (latest attempt); for an
// organisation it lists the organisation's repositories, skipping archived
// ones, then does the same for each. Every listing is followed to its last
// page; any failure fails the whole call, so a caller never acts on
// partial data.
func (c *Client) ListJobs(ctx context.Context, s domain.Scope, status string) ([]domain.GitHubJob, error) {
	op := fmt.Sprintf("list %s jobs of %s", status, s)
	if runStatuses[status] == nil {
		return nil, fmt.Errorf("%s: %w: status must be %q or %q", op, domain.ErrInvalidRequest, StatusQueued, StatusInProgress)
	}
	return c.listJobs(ctx, op, s, status)
}

// ActiveJobs lists the scope's queued and in-progress jobs in one pass, as
// ListJobs does for each: every run is listed and its jobs read once, where
// two ListJobs calls list an organisation's repositories twice, the
// in-progress runs of each repository twice, and read the jobs of every
// in-progress run twice.
func (c *Client) ActiveJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error) {
	return c.listJobs(ctx, fmt.Sprintf("list active jobs of %s", s), s, StatusQueued, StatusInProgress)
}

func (c *Client) listJobs(ctx context.Context, op string, s domain.Scope, statuses ...string) ([]domain.GitHubJob, error) {
	if s.Owner == "" && s.Enterprise != "" {
		return nil, fmt.Errorf("%s: %w: GitHub lists no jobs of a whole enterprise; name an organisation or repository in it", op, domain.ErrInvalidRequest)
	}
	if s.Owner == "" {
		return nil, fmt.Errorf("%s: %w: no owner", op, domain.ErrInvalidRequest)
	}
	if s.Repo != "" {
		return c.repoJobs(ctx, op, s.Owner, s.Repo, statuses)
	}
	repos, err := collect(ctx, func(page int) ([]*github.Repository, *github.Response, error) {
		return c.gh.Repositories.ListByOrg(ctx, s.Owner, &github.RepositoryListByOrgOptions{
			ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
	})
	if err != nil {
		return nil, c.classify(op+": list repositories", err, nil)
	}
	var out []domain.GitHubJob
	for _, r := range repos {
		if r.GetArchived() || r.GetDisabled() {
			continue
		}
		owner := r.GetOwner().GetLogin()
		if owner == "" {
			owner = s.Owner
		}
		jobs, err := c.repoJobs(ctx, op, owner, r.GetName(), statuses)
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// QueuedJobs lists the scope's queued jobs (ListJobs with StatusQueued).
func (c *Client) QueuedJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error) {
	return c.ListJobs(ctx, s, StatusQueued)
}

// repoJobs lists one repository's jobs of the statuses: the runs of each
// run status that may hold them, each run's jobs read once.
func (c *Client) repoJobs(ctx context.Context, op, owner, repo string, statuses []string) ([]domain.GitHubJob, error) {
	full := owner + "/" + repo
	var runStatusList []string
	for _, st := range statuses {
		for _, rs := range runStatuses[st] {
			if !slices.Contains(runStatusList, rs) {
				runStatusList = append(runStatusList, rs)
			}
		}
	}
	readRuns, seen := map[int64]bool{}, map[int64]bool{}
	var out []domain.GitHubJob
	for _, runStatus := range runStatusList {
		runs, err := collect(ctx, func(page int) ([]*github.WorkflowRun, *github.Response, error) {
			rs, resp, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, repo, &github.ListWorkflowRunsOptions{
				Status: runStatus, ListOptions: github.ListOptions{Page: page, PerPage: perPage},
			})
			return rs.GetWorkflowRuns(), resp, err
		})
		if err != nil {
			return nil, c.classify(fmt.Sprintf("%s: list %s runs of %s", op, runStatus, full), err, nil)
		}
		for _, run := range runs {
			if readRuns[run.GetID()] {
				continue // listed under two statuses: it moved on between the listings
			}
			readRuns[run.GetID()] = true
			jobs, err := c.runJobs(ctx, owner, repo, run.GetID())
			if errors.Is(err, domain.ErrNotFound) {
				continue // the run was deleted since it was listed
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			for _, j := range jobs {
				if slices.Contains(statuses, j.GetStatus()) && !seen[j.GetID()] {
					seen[j.GetID()] = true
					out = append(out, toJob(full, j))
				}
			}
		}
	}
	return out, nil
}

func (c *Client) runJobs(ctx context.Context, owner, repo string, runID int64) ([]*github.WorkflowJob, error) {
	jobs, err := collect(ctx, func(page int) ([]*github.WorkflowJob, *github.Response, error) {
		js, resp, err := c.gh.Actions.ListWorkflowJobs(ctx, owner, repo, runID, &github.ListWorkflowJobsOptions{
			Filter: "latest", ListOptions: github.ListOptions{Page: page, PerPage: perPage},
		})
		if js == nil {
			return nil, resp, err
		}
		return js.Jobs, resp, err
	})
	return jobs, c.classify(fmt.Sprintf("list jobs of run %d in %s/%s", runID, owner, repo), err, nil)
}

// GetJob returns a job of the repository ("owner/name"); domain.ErrNotFound
// when the repository has no such job.
func (c *Client) GetJob(ctx context.Context, repo string, id int64) (domain.GitHubJob, error) {
	op := fmt.Sprintf("get job %d in %s", id, repo)
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return domain.GitHubJob{}, err
	}
	j, _, err := c.gh.Actions.GetWorkflowJobByID(ctx, owner, name, id)
	if err != nil {
		return domain.GitHubJob{}, c.classify(op, err, nil)
	}
	return toJob(repo, j), nil
}

// CancelRun cancels a workflow run of the repository ("owner/name"). A run
// that has already completed is not an error (GitHub answers 409);
// domain.ErrNotFound when the repository has no such run.
func (c *Client) CancelRun(ctx context.Context, repo string, runID int64) error {
	op := fmt.Sprintf("cancel run %d in %s", runID, repo)
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return err
	}
	_, err = c.gh.Actions.CancelWorkflowRunByID(ctx, owner, name, runID)
	var accepted *github.AcceptedError
	if errors.As(err, &accepted) {
		return nil // 202: GitHub cancels asynchronously
	}
	var answer *github.ErrorResponse
	if errors.As(err, &answer) && answer.Response != nil && answer.Response.StatusCode == http.StatusConflict {
		return nil
	}
	return c.classify(op, err, nil)
}

// RerunJob asks GitHub to re-run a job. GitHub answers 403 while the job's
// run is still in progress: domain.ErrRunInProgress. A 403 saying the
// resource is not accessible is a missing permission (actions: write), not
// a run to wait for.
func (c *Client) RerunJob(ctx context.Context, repo string, jobID int64) error {
	op := fmt.Sprintf("re-run job %d in %s", jobID, repo)
	owner, name, err := repoCall(ctx, op, repo)
	if err != nil {
		return err
	}
	_, err = c.gh.Actions.RerunJobByID(ctx, owner, name, jobID)
	var answer *github.ErrorResponse
	if errors.As(err, &answer) && strings.Contains(answer.Message, "not accessible") {
		return c.classify(op, err, nil)
	}
	return c.classify(op, err, statusErrors{http.StatusForbidden: domain.ErrRunInProgress})
}

func toJob(repo string, j *github.WorkflowJob) domain.GitHubJob {
	return domain.GitHubJob{
		ID:         j.GetID(),
		RunID:      j.GetRunID(),
		RunAttempt: int(j.GetRunAttempt()),
		Repo:       repo,
		Name:       j.GetName(),
		Workflow:   j.GetWorkflowName(),
		Status:     j.GetStatus(),
		Conclusion: j.GetConclusion(),
		Labels:     j.Labels,
		RunnerName: j.GetRunnerName(),
		CreatedAt:  j.GetCreatedAt().Time,
	}
}
