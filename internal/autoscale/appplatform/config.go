package appplatform

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Environment variables of the standalone mode, beside the autoscaler's
// parameters (autoscale.ParamsFromEnv).
const (
	EnvGitHubToken       = "GITHUB_TOKEN"
	EnvDOToken           = "DO_API_TOKEN"
	EnvAppID             = "APP_ID"
	EnvOwner             = "OWNER"
	EnvRepo              = "REPO"
	EnvOrg               = "ORG"
	EnvWorkerName        = "WORKER_NAME"
	EnvRunnerNamePrefix  = "RUNNER_NAME_PREFIX"
	EnvGitHubAPIURL      = "GITHUB_API_URL"
	EnvDOAPIURL          = "DO_API_URL"
	EnvDeadRunnerCleanup = "DEAD_RUNNER_CLEANUP"
)

// Defaults of the optional settings.
const (
	DefaultWorkerName = "runner"
	DefaultDOAPIURL   = "https://api.digitalocean.com/"
)

// Config is the standalone App Platform autoscaler's configuration: seed
// 002's environment variables.
type Config struct {
	GitHubToken string // a credential: never logged
	DOToken     string // a credential: never logged
	AppID       string
	// Scope is where jobs are counted and dead runners removed: a
	// repository (OWNER and REPO) or an organisation (ORG).
	Scope      domain.Scope
	WorkerName string
	// RunnerNamePrefix selects this deployment's runners: in-progress jobs
	// count toward demand, and offline runners are removed, only when the
	// runner's name starts with it. Empty: every self-hosted runner.
	RunnerNamePrefix string
	// NoDeadRunnerCleanup turns dead-runner cleanup off
	// (DEAD_RUNNER_CLEANUP=false). With an organisation scope and no
	// prefix, cleanup would remove every dead-looking runner of the
	// organisation, other deployments' included, so that configuration
	// is refused unless cleanup is off.
	NoDeadRunnerCleanup bool
	GitHubAPIURL        string // empty: api.github.com; for GHES https://HOST/api/v3
	DOAPIURL            string // empty: DefaultDOAPIURL
	Params              autoscale.Params
}

// String describes the configuration without its tokens.
func (c Config) String() string {
	return fmt.Sprintf("app %s worker %q, %s, runner prefix %q, dead-runner cleanup %s, GitHub token %s, DigitalOcean token %s",
		c.AppID, c.WorkerName, scopeText(c.Scope), c.RunnerNamePrefix, onOff(!c.NoDeadRunnerCleanup), redacted(c.GitHubToken), redacted(c.DOToken))
}

// GoString is String, so %#v leaks nothing either.
func (c Config) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// cleanupProblem refuses dead-runner cleanup over a whole organisation's
// runners: with an organisation scope and no prefix, every runner of the
// organisation that looks dead would be deleted, other deployments'
// (another team's, one restarting) included.
func (c Config) cleanupProblem() string {
	if c.NoDeadRunnerCleanup || c.Scope.Owner == "" || c.Scope.Repo != "" || c.RunnerNamePrefix != "" {
		return ""
	}
	return fmt.Sprintf("%s=%q with %s empty: dead-runner cleanup would delete every offline, idle runner of the organisation, "+
		"other deployments' included; set %s to this deployment's runner name prefix, or %s=false",
		EnvOrg, c.Scope.Owner, EnvRunnerNamePrefix, EnvRunnerNamePrefix, EnvDeadRunnerCleanup)
}

func redacted(secret string) string {
	if secret == "" {
		return "unset"
	}
	return "[redacted]"
}

func scopeText(s domain.Scope) string {
	if s.Repo == "" {
		return "organisation " + s.Owner
	}
	return "repository " + s.String()
}

// ConfigError lists every problem found in the environment, each naming
// its variable. No problem quotes a token.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "invalid configuration: " + strings.Join(e.Problems, "; ")
}

// ConfigFromEnv reads the configuration from the autoscaler's environment
// variables and reports every problem at once in a *ConfigError: missing
// required variables, an ambiguous or missing scope, malformed URLs, and
// every autoscaler parameter problem (autoscale.ParamsFromEnv, which
// requires MIN_INSTANCES ≥ 1 as App Platform does), and a BREACH_THRESHOLD
// that the loop's polls, each later than POLL_INTERVAL by its API calls,
// never reach (autoscale.Params.LateProblem).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	c := Config{
		GitHubToken:      get(EnvGitHubToken),
		DOToken:          get(EnvDOToken),
		AppID:            get(EnvAppID),
		WorkerName:       get(EnvWorkerName),
		RunnerNamePrefix: getenv(EnvRunnerNamePrefix), // a prefix may end in a space
		GitHubAPIURL:     get(EnvGitHubAPIURL),
		DOAPIURL:         get(EnvDOAPIURL),
	}
	if c.WorkerName == "" {
		c.WorkerName = DefaultWorkerName
	}
	var probs []string
	required := func(name, value, what string) {
		if value == "" {
			probs = append(probs, fmt.Sprintf("%s is required: %s", name, what))
		}
	}
	required(EnvGitHubToken, c.GitHubToken, "a GitHub token with repo scope (repository) or admin:org scope (organisation)")
	required(EnvDOToken, c.DOToken, "a DigitalOcean API token with write access to the app")
	required(EnvAppID, c.AppID, "the id of the App Platform app whose worker is scaled")
	if strings.ContainsAny(c.AppID, "/?# ") {
		probs = append(probs, fmt.Sprintf("%s=%q is not an app id (want the UUID doctl apps list shows)", EnvAppID, c.AppID))
	}
	scope, scopeProbs := scopeFromEnv(get)
	c.Scope = scope
	probs = append(probs, scopeProbs...)
	switchOK := true
	if raw := get(EnvDeadRunnerCleanup); raw != "" {
		on, err := strconv.ParseBool(raw)
		if switchOK = err == nil; !switchOK {
			probs = append(probs, fmt.Sprintf("%s=%q is neither true nor false (dead-runner cleanup is on unless false)", EnvDeadRunnerCleanup, raw))
		}
		c.NoDeadRunnerCleanup = switchOK && !on
	}
	if pr := c.cleanupProblem(); pr != "" && switchOK && len(scopeProbs) == 0 {
		probs = append(probs, pr)
	}
	probs = append(probs, urlProblem(EnvGitHubAPIURL, c.GitHubAPIURL)...)
	probs = append(probs, urlProblem(EnvDOAPIURL, c.DOAPIURL)...)

	params, err := autoscale.ParamsFromEnv(getenv)
	c.Params = params
	var perr *autoscale.ParamsError
	switch {
	case errors.As(err, &perr):
		for _, p := range perr.Problems {
			probs = append(probs, p.String())
		}
	case err != nil:
		probs = append(probs, err.Error())
	default:
		if pr, ok := params.LateProblem(); !ok {
			probs = append(probs, pr.String())
		}
	}
	if len(probs) > 0 {
		return c, &ConfigError{Problems: probs}
	}
	return c, nil
}

// scopeFromEnv reads OWNER and REPO, or ORG: exactly one of the two.
func scopeFromEnv(get func(string) string) (domain.Scope, []string) {
	owner, repo, org := get(EnvOwner), get(EnvRepo), get(EnvOrg)
	var probs []string
	switch {
	case org != "" && (owner != "" || repo != ""):
		probs = append(probs, fmt.Sprintf("%s=%q and %s/%s are both set: set %s and %s for one repository, or %s alone for an organisation",
			EnvOrg, org, EnvOwner, EnvRepo, EnvOwner, EnvRepo, EnvOrg))
	case org != "":
		if strings.Contains(org, "/") {
			probs = append(probs, fmt.Sprintf("%s=%q is not an organisation name", EnvOrg, org))
		}
		return domain.Scope{Owner: org}, probs
	case owner == "" && repo == "":
		probs = append(probs, fmt.Sprintf("no scope: set %s and %s for one repository, or %s for an organisation", EnvOwner, EnvRepo, EnvOrg))
	case repo == "":
		probs = append(probs, fmt.Sprintf("%s is required with %s=%q (or set %s instead for an organisation)", EnvRepo, EnvOwner, owner, EnvOrg))
	case owner == "":
		probs = append(probs, fmt.Sprintf("%s is required with %s=%q", EnvOwner, EnvRepo, repo))
	default:
		if strings.Contains(owner, "/") {
			probs = append(probs, fmt.Sprintf("%s=%q is not an account name", EnvOwner, owner))
		}
		if strings.Contains(repo, "/") {
			probs = append(probs, fmt.Sprintf("%s=%q should be the repository's name alone, without its owner", EnvRepo, repo))
		}
	}
	return domain.Scope{Owner: owner, Repo: repo}, probs
}

// urlProblem checks an optional API root. The value is quoted without its
// user information, should someone put a credential there.
func urlProblem(name, raw string) []string {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return []string{fmt.Sprintf("%s is not an http(s) URL such as https://api.example.com/", name)}
	}
	if u.User != nil {
		return []string{fmt.Sprintf("%s=%q must not carry credentials: the tokens come from their own variables", name, u.Redacted())}
	}
	return nil
}
