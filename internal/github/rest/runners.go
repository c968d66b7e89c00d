package rest

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-github/v88/github"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RegisterRunner creates a just-in-time runner in the scope's runner group
// (Options.RunnerGroupID) with these custom labels; GitHub adds its default
// ones ("self-hosted"). domain.ErrExists when the name is taken (409),
// domain.ErrInvalidRequest when GitHub refuses the request (422).
func (c *Client) RegisterRunner(ctx context.Context, s domain.Scope, name string, labels []string) (domain.RunnerRegistration, error) {
	op := fmt.Sprintf("register runner %q in %s", name, s)
	if err := ctx.Err(); err != nil {
		return domain.RunnerRegistration{}, fmt.Errorf("%s: %w", op, err)
	}
	s = s.Runners()
	if (s.Owner == "" && s.Enterprise == "") || name == "" || len(labels) == 0 {
		return domain.RunnerRegistration{}, fmt.Errorf("%s: %w: owner, name and at least one label are required", op, domain.ErrInvalidRequest)
	}
	group := c.runnerGroup
	if s.Repo == "" && c.groupName != "" {
		id, err := c.groupID(ctx, s)
		if err != nil {
			return domain.RunnerRegistration{}, fmt.Errorf("%s: %w", op, err)
		}
		group = id
	}
	req := &github.GenerateJITConfigRequest{Name: name, RunnerGroupID: group, Labels: labels}
	if c.workFolder != "" {
		req.WorkFolder = &c.workFolder
	}
	var cfg *github.JITRunnerConfig
	var err error
	switch {
	case s.Enterprise != "":
		cfg, _, err = c.gh.Enterprise.GenerateEnterpriseJITConfig(ctx, s.Enterprise, req)
	case s.Repo == "":
		cfg, _, err = c.gh.Actions.GenerateOrgJITConfig(ctx, s.Owner, req)
	default:
		cfg, _, err = c.gh.Actions.GenerateRepoJITConfig(ctx, s.Owner, s.Repo, req)
	}
	if err != nil {
		return domain.RunnerRegistration{}, c.classify(op, err, statusErrors{
			http.StatusConflict:            domain.ErrExists,
			http.StatusUnprocessableEntity: domain.ErrInvalidRequest,
		})
	}
	if cfg.GetEncodedJITConfig() == "" || cfg.GetRunner().GetID() == 0 {
		return domain.RunnerRegistration{}, fmt.Errorf("%s: GitHub's answer lacks the runner id or its JIT config", op)
	}
	reg := domain.RunnerRegistration{
		RunnerID:  cfg.GetRunner().GetID(),
		Name:      cfg.GetRunner().GetName(),
		JITConfig: cfg.GetEncodedJITConfig(),
	}
	if reg.Name == "" {
		reg.Name = name
	}
	return reg, nil
}

// ListRunners lists the self-hosted runners registered at exactly the
// scope (an organisation's list holds no repository's runners, an
// enterprise's none of its organisations'), all pages.
func (c *Client) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	s = s.Runners()
	op := "list runners of " + s.String()
	runners, err := collect(ctx, func(page int) ([]*github.Runner, *github.Response, error) {
		opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{Page: page, PerPage: perPage}}
		var rs *github.Runners
		var resp *github.Response
		var err error
		switch {
		case s.Enterprise != "":
			rs, resp, err = c.gh.Enterprise.ListRunners(ctx, s.Enterprise, opts)
		case s.Repo == "":
			rs, resp, err = c.gh.Actions.ListOrganizationRunners(ctx, s.Owner, opts)
		default:
			rs, resp, err = c.gh.Actions.ListRunners(ctx, s.Owner, s.Repo, opts)
		}
		if rs == nil {
			return nil, resp, err
		}
		return rs.Runners, resp, err
	})
	if err != nil {
		return nil, c.classify(op, err, nil)
	}
	out := make([]domain.GitHubRunner, 0, len(runners))
	for _, r := range runners {
		labels := make([]string, 0, len(r.Labels))
		for _, l := range r.Labels {
			labels = append(labels, l.GetName())
		}
		out = append(out, domain.GitHubRunner{
			ID: r.GetID(), Name: r.GetName(), Online: r.GetStatus() == "online", Busy: r.GetBusy(), Labels: labels,
		})
	}
	return out, nil
}

// DeleteRunner removes a runner registered at the scope.
// domain.ErrRunnerBusy when it is running a job (422), domain.ErrNotFound
// when the scope has no such runner (404).
func (c *Client) DeleteRunner(ctx context.Context, s domain.Scope, id int64) error {
	s = s.Runners()
	op := fmt.Sprintf("delete runner %d in %s", id, s)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var err error
	switch {
	case s.Enterprise != "":
		_, err = c.gh.Enterprise.RemoveRunner(ctx, s.Enterprise, id)
	case s.Repo == "":
		_, err = c.gh.Actions.RemoveOrganizationRunner(ctx, s.Owner, id)
	default:
		_, err = c.gh.Actions.RemoveRunner(ctx, s.Owner, s.Repo, id)
	}
	return c.classify(op, err, statusErrors{http.StatusUnprocessableEntity: domain.ErrRunnerBusy})
}

// collect fetches every page of a listing: page 0 is the first, and each
// answer's Link header names the next.
func collect[T any](ctx context.Context, fetch func(page int) ([]T, *github.Response, error)) ([]T, error) {
	var all []T
	page := 0
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		items, resp, err := fetch(page)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if resp == nil || resp.NextPage == 0 {
			return all, nil
		}
		if resp.NextPage <= page || n >= maxPages {
			return nil, fmt.Errorf("pagination does not end: page %d links to page %d after %d pages", page, resp.NextPage, n)
		}
		page = resp.NextPage
	}
}

// groupID resolves RunnerGroup in an organisation or an enterprise, once:
// a group that does not exist is an error that lists the groups there are.
func (c *Client) groupID(ctx context.Context, s domain.Scope) (int64, error) {
	key := strings.ToLower(s.String())
	c.mu.Lock()
	id, ok := c.groupIDs[key]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	groups, err := c.runnerGroups(ctx, s)
	if err != nil {
		return 0, c.classify(fmt.Sprintf("list the runner groups of %s", s), err, nil)
	}
	var names []string
	for _, g := range groups {
		if strings.EqualFold(g.name, c.groupName) {
			c.mu.Lock()
			c.groupIDs[key] = g.id
			c.mu.Unlock()
			return g.id, nil
		}
		names = append(names, g.name)
	}
	return 0, fmt.Errorf("%w: runner group %q does not exist in %s (its groups: %s)", domain.ErrNotFound, c.groupName, s, strings.Join(names, ", "))
}

type runnerGroup struct {
	id   int64
	name string
}

// runnerGroups lists an organisation's or an enterprise's runner groups,
// all pages.
func (c *Client) runnerGroups(ctx context.Context, s domain.Scope) ([]runnerGroup, error) {
	page := github.ListOptions{PerPage: perPage}
	return collect(ctx, func(n int) ([]runnerGroup, *github.Response, error) {
		page.Page = n
		var out []runnerGroup
		if s.Enterprise != "" {
			list, resp, err := c.gh.Enterprise.ListRunnerGroups(ctx, s.Enterprise, &github.ListEnterpriseRunnerGroupOptions{ListOptions: page})
			if err != nil {
				return nil, resp, err
			}
			for _, g := range list.RunnerGroups {
				out = append(out, runnerGroup{g.GetID(), g.GetName()})
			}
			return out, resp, nil
		}
		list, resp, err := c.gh.Actions.ListOrganizationRunnerGroups(ctx, s.Owner, &github.ListOrgRunnerGroupOptions{ListOptions: page})
		if err != nil {
			return nil, resp, err
		}
		for _, g := range list.RunnerGroups {
			out = append(out, runnerGroup{g.GetID(), g.GetName()})
		}
		return out, resp, nil
	})
}
