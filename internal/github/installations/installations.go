// Package installations is the GitHub port for a GitHub App installed on
// several accounts. Each call concerns one account (the owner of a
// repository, or an organisation) and goes to that account's installation
// with its own token: an App is installed at most once per account, so the
// owner names the installation. Installations are looked up with the App's
// own credentials when first needed, and their clients kept.
package installations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v88/github"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/ratelimit"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// ErrNotInstalled: the App has no usable installation on the account (it
// was never installed, was removed, or is suspended). Jobs of that account
// cannot get runners until an administrator installs the App again.
var ErrNotInstalled = fmt.Errorf("%w: the GitHub App is not installed on this account", domain.ErrUnauthorized)

const (
	// foundFor is how long a found installation is trusted before it is
	// looked up again (it may have been removed).
	foundFor = time.Hour
	// missingFor is how long a missing one is remembered: a new
	// installation is noticed this soon.
	missingFor = time.Minute
	// failingFor is how long a lookup GitHub failed (an outage, a rate
	// limit) is remembered: intake checks the account of every arrival,
	// and each would otherwise wait for GitHub to fail again. An
	// installation found before is kept meanwhile: GitHub failing says
	// nothing about it.
	failingFor = 15 * time.Second
	// appAccount is the budget of the App's own calls (its JWT: finding
	// installations, listing them), apart from every installation's. No
	// GitHub login has parentheses, so it names no account.
	appAccount = "(app)"
)

// Options configure the App.
type Options struct {
	// BaseURL is the API root (rest.DefaultBaseURL; a GitHub Enterprise
	// Server's https://HOST/api/v3/).
	BaseURL    string
	AppID      int64
	PrivateKey []byte // PEM; a credential, never logged
	// Client configures each installation's REST client (timeouts,
	// runner group, transport, clock); its credentials are set here.
	Client rest.Options
	Clock  domain.Clock
	Log    *slog.Logger
	// RateLimits counts each installation's budget and pauses; nil counts
	// nothing (the budgets are kept all the same).
	RateLimits *ratelimit.Metrics
}

// GitHub routes each call to its account's installation.
type GitHub struct {
	o   Options
	app *github.Client // authenticated as the App itself (JWT)

	mu      sync.Mutex
	owners  map[string]lookup
	clients map[int64]*rest.Client
	http    map[int64]*http.Client
	budgets map[int64]*ratelimit.Budget
	repos   []domain.Scope // every installation's repositories, as of reposAt
	reposAt time.Time
}

type lookup struct {
	id    int64
	err   error
	until time.Time // kept until then
}

// New checks the key and returns the App's GitHub; it makes no request.
func New(o Options) (*GitHub, error) {
	if o.AppID <= 0 {
		return nil, errors.New("github app: no App id (--github-app-id)")
	}
	o.BaseURL = rest.APIRoot(o.BaseURL)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	g := &GitHub{o: o, owners: map[string]lookup{}, clients: map[int64]*rest.Client{},
		http: map[int64]*http.Client{}, budgets: map[int64]*ratelimit.Budget{}}
	appBudget := ratelimit.NewBudget(appAccount, g.clock(), o.RateLimits, o.Log)
	atr, err := ghinstallation.NewAppsTransport(appBudget.Transport(g.next()), o.AppID, o.PrivateKey)
	if err != nil {
		// The message names what is wrong with the key, never the key.
		return nil, fmt.Errorf("github app %d: the private key is not a PEM RSA key: %w", o.AppID, err)
	}
	atr.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	// Rate limits are waited out by the budgets alone, on bullpen's clock
	// (see rest.New).
	g.app, err = github.NewClient(github.WithHTTPClient(&http.Client{Transport: atr, Timeout: or(o.Client.Timeout, rest.DefaultTimeout)}),
		github.WithURLs(&o.BaseURL, nil), github.WithUserAgent("bullpen"), github.WithDisableRateLimitCheck())
	if err != nil {
		return nil, fmt.Errorf("github app client for %s: %w", o.BaseURL, err)
	}
	return g, nil
}

// Check asks GitHub who the App is: it fails, saying what to fix, when
// the key is not the App's, the App id is wrong, or GitHub refuses the
// App's JWT for another reason, such as this machine's clock being off.
func (g *GitHub) Check(ctx context.Context) (string, error) {
	app, resp, err := g.app.Apps.Get(ctx, "")
	switch {
	case resp != nil && resp.StatusCode == http.StatusUnauthorized:
		return "", fmt.Errorf("GitHub refused the App's credentials (%s): check that --github-app-id %d is the App whose private key --github-app-key-file holds, "+
			"and that this machine's clock is right (GitHub refuses a JWT issued in the future or expiring more than ten minutes ahead)", refusal(err), g.o.AppID)
	case err != nil:
		return "", rest.Classify(fmt.Sprintf("ask GitHub for App %d", g.o.AppID), err, g.clock())
	case app.GetID() != 0 && app.GetID() != g.o.AppID:
		return "", fmt.Errorf("the private key is App %d's, not App %d's (--github-app-id)", app.GetID(), g.o.AppID)
	}
	return app.GetSlug(), nil
}

// CheckAccount says whether the App can act for owner: ErrNotInstalled
// when it has no usable installation there (the answer is kept a minute).
func (g *GitHub) CheckAccount(ctx context.Context, owner string) error {
	_, err := g.installation(ctx, owner)
	return err
}

// client returns the REST client of owner's installation.
func (g *GitHub) client(ctx context.Context, owner string) (*rest.Client, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: no account named", domain.ErrInvalidRequest)
	}
	return perInstallation(ctx, g, owner, g.clients, func(id int64) (*rest.Client, error) {
		o := g.o.Client
		o.BaseURL, o.AppID, o.InstallationID, o.PrivateKey, o.Token = g.o.BaseURL, g.o.AppID, id, g.o.PrivateKey, ""
		o.Transport = g.budget(id, owner).Transport(g.next())
		return rest.New(o)
	})
}

// perInstallation is owner's installation's entry of made: built on first
// use (build is called with g.mu held), then kept for later calls.
func perInstallation[T any](ctx context.Context, g *GitHub, owner string, made map[int64]T, build func(id int64) (T, error)) (T, error) {
	var none T
	id, err := g.installation(ctx, owner)
	if err != nil {
		return none, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := made[id]; ok {
		return v, nil
	}
	v, err := build(id)
	if err != nil {
		return none, err
	}
	made[id] = v
	return v, nil
}

// installation finds owner's installation: the organisation's, else the
// user's. Answers are kept (foundFor, missingFor, failingFor).
func (g *GitHub) installation(ctx context.Context, owner string) (int64, error) {
	key := strings.ToLower(owner)
	now := g.now()
	g.mu.Lock()
	prev, ok := g.owners[key]
	g.mu.Unlock()
	if ok && now.Before(prev.until) {
		return prev.id, prev.err
	}
	inst, resp, err := g.app.Apps.GetOrganizationInstallation(ctx, owner)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		inst, resp, err = g.app.Apps.GetUserInstallation(ctx, owner)
	}
	if ctx.Err() != nil {
		// The caller gave up (its own deadline): that says nothing about
		// GitHub, so nothing is kept for the next caller.
		return prev.id, fmt.Errorf("find the App's installation on %s: %w", owner, ctx.Err())
	}
	l := lookup{id: inst.GetID(), until: now.Add(foundFor)}
	switch {
	case resp != nil && resp.StatusCode == http.StatusNotFound:
		l = lookup{err: fmt.Errorf("%w: %s (install it on the account, or check its repository selection)", ErrNotInstalled, owner), until: now.Add(missingFor)}
	case err != nil && ok && prev.err == nil:
		l = lookup{id: prev.id, until: now.Add(failingFor)}
		g.o.Log.Warn("GitHub failed to confirm an account's App installation; using the one found before", "account", owner,
			"err", rest.Classify("find the App's installation on "+owner, err, g.clock()))
	case err != nil:
		l = lookup{err: rest.Classify("find the App's installation on "+owner, err, g.clock()), until: now.Add(failingFor)}
	case inst.SuspendedAt != nil:
		l = lookup{err: fmt.Errorf("%w: %s suspended it on %s", ErrNotInstalled, owner, inst.SuspendedAt.Format(time.DateOnly)), until: now.Add(missingFor)}
	}
	if errors.Is(l.err, ErrNotInstalled) {
		g.o.Log.Warn("no GitHub App installation for an account", "account", owner, "err", l.err)
	}
	g.mu.Lock()
	g.owners[key] = l
	g.mu.Unlock()
	return l.id, l.err
}

// refusal is GitHub's message in a refusal of the App's JWT, which says
// why (a bad signature, an unknown issuer, an expiry too far ahead); it
// echoes none of the JWT.
func refusal(err error) string {
	const limit = 300
	var answer *github.ErrorResponse
	if !errors.As(err, &answer) || answer.Message == "" {
		return "GitHub gave no reason"
	}
	msg := answer.Message
	if len(msg) > limit {
		msg = msg[:limit] + "…"
	}
	return fmt.Sprintf("GitHub said: %q", msg)
}

func (g *GitHub) now() time.Time { return g.clock().Now() }

func ownerOf(repo string) string {
	owner, _, _ := strings.Cut(repo, "/")
	return owner
}

func or(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// CheckToken asks GitHub whose a token is: it fails, saying what to fix,
// when GitHub refuses it.
func CheckToken(ctx context.Context, o rest.Options) (string, error) {
	o.BaseURL = rest.APIRoot(o.BaseURL)
	next := o.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	gh, err := github.NewClient(github.WithHTTPClient(&http.Client{Transport: next, Timeout: or(o.Timeout, rest.DefaultTimeout)}),
		github.WithURLs(&o.BaseURL, nil), github.WithUserAgent("bullpen"), github.WithAuthToken(o.Token), github.WithDisableRateLimitCheck())
	if err != nil {
		return "", err
	}
	user, resp, err := gh.Users.Get(ctx, "")
	switch {
	case resp != nil && resp.StatusCode == http.StatusUnauthorized:
		return "", errors.New("GitHub refused the token ($BULLPEN_GITHUB_TOKEN or $GITHUB_TOKEN): it is wrong, expired or revoked")
	case resp != nil && resp.StatusCode == http.StatusForbidden:
		return "", nil // a token that may not read its user (an installation token) can still do bullpen's work
	case err != nil:
		return "", fmt.Errorf("ask GitHub whose token this is: %w", err)
	}
	return user.GetLogin(), nil
}

// HTTPClient returns an HTTP client authenticated as owner's installation,
// for the calls the REST client does not make (a configuration file).
func (g *GitHub) HTTPClient(ctx context.Context, owner string) (*http.Client, error) {
	return perInstallation(ctx, g, owner, g.http, func(id int64) (*http.Client, error) {
		itr, err := ghinstallation.New(g.budget(id, owner).Transport(g.next()), g.o.AppID, id, g.o.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("github app %d: %w", g.o.AppID, err)
		}
		itr.BaseURL = strings.TrimSuffix(g.o.BaseURL, "/")
		return &http.Client{Transport: itr, Timeout: or(g.o.Client.Timeout, rest.DefaultTimeout)}, nil
	})
}

// budget is installation id's rate limit, shared by its clients; called
// with g.mu held.
func (g *GitHub) budget(id int64, owner string) *ratelimit.Budget {
	b, ok := g.budgets[id]
	if !ok {
		b = ratelimit.NewBudget(strings.ToLower(owner), g.clock(), g.o.RateLimits, g.o.Log)
		g.budgets[id] = b
	}
	return b
}

func (g *GitHub) next() http.RoundTripper {
	if g.o.Client.Transport != nil {
		return g.o.Client.Transport
	}
	return http.DefaultTransport
}

func (g *GitHub) clock() domain.Clock {
	if g.o.Clock != nil {
		return g.o.Clock
	}
	return clock.Real{}
}

// BaseURL is the API root the App calls, ending in /.
func (g *GitHub) BaseURL() string { return g.o.BaseURL }
