package appplatform

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func validEnv() map[string]string {
	return map[string]string{EnvGitHubToken: testGitHubToken, EnvDOToken: testDOToken, EnvAppID: "a1b2c3", EnvOwner: "acme", EnvRepo: "app"}
}

func TestConfigFromEnv(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{"a repository with defaults", nil, func(t *testing.T, c Config) {
			if c.Scope != (domain.Scope{Owner: "acme", Repo: "app"}) || c.WorkerName != DefaultWorkerName || c.RunnerNamePrefix != "" {
				t.Fatalf("%+v", c)
			}
			if c.Params.PollInterval != time.Minute || c.Params.MinInstances != 1 {
				t.Fatalf("params %+v", c.Params)
			}
		}},
		{"an organisation", map[string]string{EnvOwner: "", EnvRepo: "", EnvOrg: "acme", EnvRunnerNamePrefix: "do-"}, func(t *testing.T, c Config) {
			if c.Scope != (domain.Scope{Owner: "acme"}) {
				t.Fatalf("scope %+v", c.Scope)
			}
		}},
		{"everything set", map[string]string{
			EnvWorkerName: "gh-runner", EnvRunnerNamePrefix: "do-", EnvGitHubAPIURL: "https://ghe.example.com/api/v3",
			EnvDOAPIURL: "http://127.0.0.1:9999", "MAX_INSTANCES": "9", "POLL_INTERVAL": "30",
		}, func(t *testing.T, c Config) {
			if c.WorkerName != "gh-runner" || c.RunnerNamePrefix != "do-" || c.GitHubAPIURL != "https://ghe.example.com/api/v3" ||
				c.DOAPIURL != "http://127.0.0.1:9999" || c.Params.MaxInstances != 9 || c.Params.PollInterval != 30*time.Second {
				t.Fatalf("%+v", c)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := validEnv()
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := ConfigFromEnv(envOf(env))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestConfigScopeProblems(t *testing.T) {
	cases := []struct {
		owner, repo, org string
		want             string
	}{
		{"", "", "", "no scope: set OWNER and REPO"},
		{"acme", "", "", "REPO is required with OWNER"},
		{"", "app", "", "OWNER is required with REPO"},
		{"acme", "app", "acme", "ORG=\"acme\" and OWNER/REPO are both set"},
		{"", "app", "acme", "are both set"},
		{"acme", "acme/app", "", "REPO=\"acme/app\" should be the repository's name alone"},
		{"", "", "acme/app", "is not an organisation name"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%q %q %q", c.owner, c.repo, c.org), func(t *testing.T) {
			env := validEnv()
			env[EnvOwner], env[EnvRepo], env[EnvOrg] = c.owner, c.repo, c.org
			_, err := ConfigFromEnv(envOf(env))
			var cerr *ConfigError
			if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || !strings.Contains(cerr.Problems[0], c.want) {
				t.Fatalf("want one problem mentioning %q, got %v", c.want, err)
			}
		})
	}
}

// TestConfigReportsEveryProblem: one run names every problem, and quotes
// no token.
func TestConfigReportsEveryProblem(t *testing.T) {
	env := map[string]string{
		EnvDOToken:      testDOToken,
		EnvOwner:        "acme",
		EnvOrg:          "acme",
		EnvGitHubAPIURL: "ftp://nowhere",
		EnvDOAPIURL:     "https://user:" + testDOToken + "@api.example.com/",
		"MIN_INSTANCES": "0",
		"POLL_INTERVAL": "1m",
		"SCALE_UP_STEP": "0",
	}
	_, err := ConfigFromEnv(envOf(env))
	var cerr *ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("want a *ConfigError, got %v", err)
	}
	wants := []string{
		"GITHUB_TOKEN is required",
		"APP_ID is required",
		"are both set",
		"GITHUB_API_URL is not an http(s) URL",
		"DO_API_URL=\"https://user:xxxxx@api.example.com/\" must not carry credentials",
		"MIN_INSTANCES=0 must be at least 1 (DigitalOcean App Platform requires at least one instance)",
		"POLL_INTERVAL=\"1m\" is not a number of seconds",
		"SCALE_UP_STEP=0 must be at least 1",
	}
	if len(cerr.Problems) != len(wants) {
		t.Fatalf("%d problems, want %d:\n%s", len(cerr.Problems), len(wants), strings.Join(cerr.Problems, "\n"))
	}
	for i, w := range wants {
		if !strings.Contains(cerr.Problems[i], w) {
			t.Errorf("problem %d: %q lacks %q", i, cerr.Problems[i], w)
		}
	}
	if strings.Contains(err.Error(), testDOToken) {
		t.Fatal("a token was quoted")
	}
}

func TestConfigNeverPrintsTokens(t *testing.T) {
	c, err := ConfigFromEnv(envOf(validEnv()))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c)} {
		if strings.Contains(text, testGitHubToken) || strings.Contains(text, testDOToken) {
			t.Fatalf("a token printed: %s", text)
		}
		if !strings.Contains(text, "[redacted]") {
			t.Fatalf("tokens not marked redacted: %s", text)
		}
	}
}

// The loop waits POLL_INTERVAL after each poll's API calls, so its polls
// come later than POLL_INTERVAL: a threshold that only exact polls reach
// is refused at start, by the environment and by New.
func TestConfigRefusesAThresholdLatePollsNeverReach(t *testing.T) {
	env := validEnv()
	env["POLL_INTERVAL"] = "120"
	_, err := ConfigFromEnv(envOf(env))
	var cerr *ConfigError
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 ||
		!strings.HasPrefix(cerr.Problems[0], "BREACH_THRESHOLD=1.5 is never reached once polls run late: the autoscaler waits POLL_INTERVAL=120s") {
		t.Fatalf("want the late-poll problem alone, got %v", err)
	}
	env["BREACH_THRESHOLD"] = "1.46"
	c, err := ConfigFromEnv(envOf(env))
	if err != nil {
		t.Fatalf("the threshold the problem suggests: %v", err)
	}
	c.Params.BreachThreshold = 1.5
	if _, err := New(c, Deps{}); err == nil || !strings.Contains(err.Error(), "never reached once polls run late") {
		t.Fatalf("New: %v", err)
	}
}

// With an organisation scope and no prefix, dead-runner cleanup would
// delete every dead-looking runner of the organisation, other
// deployments' included: refused at start unless cleanup is off.
func TestConfigRefusesOrganisationWideCleanup(t *testing.T) {
	env := validEnv()
	env[EnvOwner], env[EnvRepo], env[EnvOrg] = "", "", "acme"
	_, err := ConfigFromEnv(envOf(env))
	var cerr *ConfigError
	want := `ORG="acme" with RUNNER_NAME_PREFIX empty: dead-runner cleanup would delete every offline, idle runner of the organisation, ` +
		`other deployments' included; set RUNNER_NAME_PREFIX to this deployment's runner name prefix, or DEAD_RUNNER_CLEANUP=false`
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0] != want {
		t.Fatalf("got %v\nwant the one problem %q", err, want)
	}

	env[EnvDeadRunnerCleanup] = "false"
	c, err := ConfigFromEnv(envOf(env))
	if err != nil || !c.NoDeadRunnerCleanup {
		t.Fatalf("with cleanup off: %v, off %v", err, c.NoDeadRunnerCleanup)
	}
	if !strings.Contains(c.String(), "dead-runner cleanup off") {
		t.Fatalf("the configuration logged does not say cleanup is off: %s", c)
	}
	// New refuses it too, for a Config not read from the environment.
	c.NoDeadRunnerCleanup = false
	if _, err := New(c, Deps{}); err == nil || !strings.Contains(err.Error(), "DEAD_RUNNER_CLEANUP=false") {
		t.Fatalf("New: %v", err)
	}

	env[EnvDeadRunnerCleanup] = "sometimes"
	_, err = ConfigFromEnv(envOf(env))
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 ||
		cerr.Problems[0] != `DEAD_RUNNER_CLEANUP="sometimes" is neither true nor false (dead-runner cleanup is on unless false)` {
		t.Fatalf("an unreadable switch: %v", err)
	}

	// A repository, or an organisation with a prefix, keeps cleanup on.
	repo := validEnv()
	org := validEnv()
	org[EnvOwner], org[EnvRepo], org[EnvOrg], org[EnvRunnerNamePrefix] = "", "", "acme", "do-"
	for _, e := range []map[string]string{repo, org} {
		if c, err := ConfigFromEnv(envOf(e)); err != nil || c.NoDeadRunnerCleanup {
			t.Fatalf("%v: %v, cleanup off %v", c.Scope, err, c.NoDeadRunnerCleanup)
		}
	}
}
