// Package rest is bullpen's GitHub port over the REST API (go-github), with
// a personal access token or a GitHub App installation for credentials.
//
// Every list follows pagination to its end (per_page=100, Link headers).
// Errors are typed for the callers that branch on them: domain.ErrNotFound
// (404), domain.ErrRunnerBusy (422 deleting a runner), domain.ErrExists (409
// registering a runner), ErrUnauthorized (401), *RateLimitError (403/429
// with x-ratelimit-remaining: 0, retry-after or GitHub's secondary-limit
// answer; wraps domain.ErrRateLimited and carries when to retry), and
// IsTransient for 5xx, timeouts, network failures and rate limits. No
// error carries the token, the App's key or a JIT config, and the client
// logs nothing.
//
// The client itself never holds a call back after a rate limit: it sends
// every call it is asked to make. Pausing an account's calls is the job
// of the ratelimit.Budget its Transport goes through.
package rest

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
	"github.com/bullpen-ci/bullpen/internal/httpauth"
)

// Defaults for zero Options fields.
const (
	DefaultBaseURL       = "https://api.github.com/"
	DefaultTimeout       = 30 * time.Second
	DefaultRunnerGroupID = 1 // the "Default" runner group
	userAgent            = "bullpen"
	perPage              = 100
	// maxPages bounds a listing, so a server that links pages in a circle
	// cannot keep a caller forever: 1000 pages of 100 is far beyond any
	// real organisation's runners or runs in flight.
	maxPages = 1000
)

// Options configure a Client. Give either Token or the three App fields.
type Options struct {
	// BaseURL is the API root: DefaultBaseURL when empty; for GitHub
	// Enterprise Server "https://HOST/api/v3/".
	BaseURL string
	// Token is a personal access token (repo or admin:org scope) or any
	// other bearer token. A credential: never logged.
	Token string
	// AppID, InstallationID and PrivateKey (PEM) authenticate as a GitHub
	// App installation; tokens are fetched and renewed by ghinstallation.
	// The key is a credential: never logged.
	AppID          int64
	InstallationID int64
	PrivateKey     []byte
	// Timeout bounds each HTTP request; DefaultTimeout when zero.
	Timeout time.Duration
	// RunnerGroupID is the group JIT runners join; DefaultRunnerGroupID
	// when zero.
	RunnerGroupID int64
	// RunnerGroup, when set, is the group organisation runners join, by
	// name: resolved to its id in each organisation, once.
	RunnerGroup string
	// WorkFolder is the runners' work directory, relative to the runner's
	// own; GitHub's default (_work) when empty.
	WorkFolder string
	// Transport is the HTTP transport under authentication;
	// http.DefaultTransport when nil.
	Transport http.RoundTripper
	// Clock dates rate-limit resets given as retry-after; the wall clock
	// when nil.
	Clock domain.Clock
}

// String describes the options without their secrets, so printing them by
// accident leaks nothing.
func (o Options) String() string {
	auth := "none"
	switch {
	case o.Token != "":
		auth = "token [redacted]"
	case o.AppID != 0:
		auth = fmt.Sprintf("app %d installation %d key [redacted]", o.AppID, o.InstallationID)
	}
	return fmt.Sprintf("rest.Options{BaseURL: %q, Auth: %s, Timeout: %s, RunnerGroupID: %d}", o.BaseURL, auth, o.Timeout, o.RunnerGroupID)
}

// GoString is String, for %#v.
func (o Options) GoString() string { return o.String() }

// LogValue is String, for slog.
func (o Options) LogValue() slog.Value { return slog.StringValue(o.String()) }

// Client is the GitHub REST API as bullpen uses it. It is safe for
// concurrent use.
type Client struct {
	gh          *github.Client
	clk         domain.Clock
	runnerGroup int64
	groupName   string
	workFolder  string

	mu       sync.Mutex
	groupIDs map[string]int64 // RunnerGroup's id by lower-case organisation
}

var _ domain.GitHub = (*Client)(nil)

// New returns a client. It makes no request: bad credentials show on the
// first call as ErrUnauthorized.
func New(opts Options) (*Client, error) {
	opts.BaseURL = APIRoot(opts.BaseURL)
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RunnerGroupID == 0 {
		opts.RunnerGroupID = DefaultRunnerGroupID
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	transport, err := authTransport(opts)
	if err != nil {
		return nil, err
	}
	// go-github's own rate-limit check would refuse calls by the wall
	// clock, and after a secondary limit that names no time until the
	// primary budget's hourly reset: waits are the caller's (the
	// account's ratelimit.Budget under Transport), on bullpen's clock.
	gh, err := github.NewClient(
		github.WithHTTPClient(&http.Client{Transport: transport, Timeout: opts.Timeout}),
		github.WithURLs(&opts.BaseURL, nil),
		github.WithUserAgent(userAgent),
		github.WithDisableRateLimitCheck(),
	)
	if err != nil {
		return nil, fmt.Errorf("github client for %s: %w", opts.BaseURL, err)
	}
	return &Client{gh: gh, clk: opts.Clock, runnerGroup: opts.RunnerGroupID, groupName: opts.RunnerGroup, workFolder: opts.WorkFolder,
		groupIDs: map[string]int64{}}, nil
}

// authTransport adds the credentials to every request.
func authTransport(opts Options) (http.RoundTripper, error) {
	app := opts.AppID != 0 || opts.InstallationID != 0 || len(opts.PrivateKey) > 0
	switch {
	case opts.Token != "" && app:
		return nil, errors.New("github credentials: give a token or a GitHub App, not both")
	case opts.Token != "":
		return httpauth.BearerTransport(opts.Token, opts.Transport), nil
	case !app:
		return nil, errors.New("github credentials: a token or a GitHub App (app id, installation id, private key) is required")
	case opts.AppID <= 0 || opts.InstallationID <= 0 || len(opts.PrivateKey) == 0:
		return nil, errors.New("github credentials: a GitHub App needs its app id, installation id and private key")
	}
	itr, err := ghinstallation.New(opts.Transport, opts.AppID, opts.InstallationID, opts.PrivateKey)
	if err != nil {
		// ghinstallation's message names the parsing problem, never the key.
		return nil, fmt.Errorf("github app %d: %w", opts.AppID, err)
	}
	itr.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	itr.Client = &http.Client{Transport: opts.Transport, Timeout: opts.Timeout}
	return itr, nil
}

// APIRoot is u as the clients use it: DefaultBaseURL when empty, ending in
// a slash.
func APIRoot(u string) string {
	if u == "" {
		u = DefaultBaseURL
	}
	if !strings.HasSuffix(u, "/") {
		u += "/"
	}
	return u
}

// repoCall checks a call on a repository ("owner/name") before it goes
// out: the repository's owner and name, or why op cannot be made.
func repoCall(ctx context.Context, op, repo string) (owner, name string, err error) {
	owner, name, err = splitRepo(repo)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", op, err)
	}
	return owner, name, nil
}

// splitRepo splits "owner/name".
func splitRepo(full string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(full, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q: %w: want owner/name", full, domain.ErrInvalidRequest)
	}
	return owner, name, nil
}
