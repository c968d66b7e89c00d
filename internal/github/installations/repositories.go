package installations

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v88/github"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// reposFor is how long the installations' repository list is kept.
const reposFor = time.Hour

// Repositories lists every repository of every installation of the App
// (GitHub's repository selection applied), so that missed-webhook
// reconciliation covers repositories whose jobs bullpen never heard of.
// The list is read at most once an hour.
func (g *GitHub) Repositories(ctx context.Context) ([]domain.Scope, error) {
	now := g.now()
	g.mu.Lock()
	if g.repos != nil && now.Sub(g.reposAt) < reposFor {
		out := g.repos
		g.mu.Unlock()
		return out, nil
	}
	g.mu.Unlock()
	var installs []*github.Installation
	for page := 1; ; page++ {
		list, resp, err := g.app.Apps.ListInstallations(ctx, &github.ListOptions{Page: page, PerPage: 100})
		if err != nil {
			return nil, rest.Classify("list the App's installations", err, g.clock())
		}
		installs = append(installs, list...)
		if resp.NextPage == 0 {
			break
		}
	}
	var out []domain.Scope
	for _, in := range installs {
		if in.SuspendedAt != nil || in.GetAccount().GetLogin() == "" {
			continue
		}
		repos, err := g.installationRepos(ctx, in.GetAccount().GetLogin())
		if err != nil {
			return nil, err
		}
		out = append(out, repos...)
	}
	g.mu.Lock()
	g.repos, g.reposAt = out, now
	g.mu.Unlock()
	return out, nil
}

func (g *GitHub) installationRepos(ctx context.Context, owner string) ([]domain.Scope, error) {
	hc, err := g.HTTPClient(ctx, owner)
	if err != nil {
		return nil, err
	}
	gh, err := github.NewClient(github.WithHTTPClient(hc), github.WithURLs(&g.o.BaseURL, nil), github.WithUserAgent("bullpen"),
		github.WithDisableRateLimitCheck()) // hc's budget waits limits out
	if err != nil {
		return nil, err
	}
	var out []domain.Scope
	for page := 1; ; page++ {
		list, resp, err := gh.Apps.ListRepos(ctx, &github.ListOptions{Page: page, PerPage: 100})
		if err != nil {
			return nil, rest.Classify(fmt.Sprintf("list the repositories of %s's installation", owner), err, g.clock())
		}
		for _, r := range list.Repositories {
			if o, name, ok := strings.Cut(r.GetFullName(), "/"); ok && !r.GetArchived() {
				out = append(out, domain.Scope{Owner: o, Repo: name})
			}
		}
		if resp.NextPage == 0 {
			return out, nil
		}
	}
}
