package app

import (
	"context"
	"net/http"

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
		client.Transport = ratelimit.NewBudget("token", a.opts.Clock, limits).Transport(http.DefaultTransport)
		login, err := installations.CheckToken(ctx, client)
		if err != nil {
			return err
		}
		c, err := rest.New(client)
		if err != nil {
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
