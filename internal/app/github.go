package app

import (
	"context"
	"fmt"
	"net/http"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/installations"
	"github.com/bullpen-ci/bullpen/internal/github/ratelimit"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// GitHubAPI configures a real GitHub (--github app or token).
type GitHubAPI struct {
	URL        string // the API root; GitHub.com's when empty, https://HOST/api/v3/ for GHES
	AppID      int64  // with a private key: a GitHub App, installed on any number of accounts
	PrivateKey []byte // PEM; a credential
	Token      string // or a token; a credential
	// RunnerGroupID is the runner group organisation runners join; the
	// default group when zero.
	RunnerGroupID int64
	// RunnerGroup names it instead, resolved in each organisation.
	RunnerGroup string
	// WorkFolder is the runners' work directory; GitHub's _work when empty.
	WorkFolder string
}

func (o GitHubAPI) check(kind string) []string {
	switch {
	case kind == "app" && (o.AppID <= 0 || len(o.PrivateKey) == 0):
		return []string{"github app: an App id and its private key are required (--github-app-id, --github-app-key-file)"}
	case kind == "token" && o.Token == "":
		return []string{"github token: no token ($BULLPEN_GITHUB_TOKEN or $GITHUB_TOKEN)"}
	}
	return nil
}

// errEnterpriseNeedsToken: GitHub serves enterprise runners to a classic
// personal access token only.
const errEnterpriseNeedsToken = "runner scope enterprise needs --github token (or sim): GitHub lets only a classic personal access token with the manage_runners:enterprise scope manage an enterprise's runners, never an App's installation token"

// checkRunnerScope validates RunnerScope and Enterprise together.
func (o *Options) checkRunnerScope() []string {
	if o.RunnerScope == "" {
		o.RunnerScope = "repo"
	}
	return RunnerScopeProblems(o.RunnerScope, o.Enterprise, o.GitHub)
}

// RunnerScopeProblems says what is wrong with a runner scope (repo, org or
// enterprise), the enterprise named and the GitHub kind (sim, app, token)
// together, so that a command can name it with its other flags' problems.
func RunnerScopeProblems(scope, enterprise, github string) []string {
	switch scope {
	case "repo", "org":
	case "enterprise":
		var problems []string
		if enterprise == "" {
			problems = append(problems, "runner scope enterprise needs the enterprise's slug (--github-enterprise)")
		}
		if github == "app" {
			problems = append(problems, errEnterpriseNeedsToken)
		}
		return problems
	default:
		return []string{fmt.Sprintf("runner scope %q: want repo, org or enterprise", scope)}
	}
	if enterprise != "" {
		return []string{fmt.Sprintf("an enterprise (%q) is named but the runner scope is %s: give --runner-scope enterprise, or leave the enterprise out", enterprise, scope)}
	}
	return nil
}

// checkEnterpriseAccess lists the enterprise's runners once, so that a
// token that cannot manage them stops serve at start with what to fix.
func (a *App) checkEnterpriseAccess(ctx context.Context, gh domain.GitHub) error {
	if a.opts.RunnerScope != "enterprise" {
		return nil
	}
	ent := domain.Scope{Enterprise: a.opts.Enterprise}
	if _, err := gh.ListRunners(ctx, ent); err != nil {
		return fmt.Errorf("the token cannot manage the runners of enterprise %q (it needs the manage_runners:enterprise scope, on a classic personal access token of an enterprise owner): %w", a.opts.Enterprise, err)
	}
	return nil
}

// newRealGitHub builds the GitHub App or token client and checks its
// credentials with GitHub before anything else starts.
func (a *App) newRealGitHub(ctx context.Context) error {
	o := a.opts.GitHubAPI
	client := rest.Options{BaseURL: o.URL, RunnerGroupID: o.RunnerGroupID, RunnerGroup: o.RunnerGroup, WorkFolder: o.WorkFolder, Clock: a.opts.Clock}
	limits, err := ratelimit.NewMetrics(a.opts.Registry)
	if err != nil {
		return err
	}
	switch a.opts.GitHub {
	case "app":
		g, err := installations.New(installations.Options{BaseURL: o.URL, AppID: o.AppID, PrivateKey: o.PrivateKey,
			Client: client, Clock: a.opts.Clock, Log: a.opts.Log.With("loop", "github"), RateLimits: limits})
		if err != nil {
			return err
		}
		slug, err := g.Check(ctx)
		if err != nil {
			return err
		}
		a.opts.Log.Info("GitHub App", "app", slug, "id", o.AppID, "url", client.BaseURL)
		a.GitHub = g
	case "token":
		client.Token = o.Token
		client.Transport = ratelimit.NewBudget("token", a.opts.Clock, limits, a.opts.Log.With("loop", "github")).Transport(http.DefaultTransport)
		a.githubTransport = client.Transport
		login, err := installations.CheckToken(ctx, client)
		if err != nil {
			return err
		}
		c, err := rest.New(client)
		if err != nil {
			return err
		}
		if err := a.checkEnterpriseAccess(ctx, c); err != nil {
			return err
		}
		a.opts.Log.Info("GitHub token", "user", login, "url", client.BaseURL)
		a.GitHub = c
	default:
		return errNoProvider("github", a.opts.GitHub)
	}
	return nil
}

// errSimCloudNeedsSimGitHub: simulated agents run simulated jobs only.
const errSimCloudNeedsSimGitHub = "the simulated cloud's agents cannot run a real GitHub's jobs: use --cloud local or aws with --github app or token"
