package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

// TestServeWithEnterpriseRunners runs serve with a token on an enterprise
// of two organisations: the jobs of both get runners registered once, at
// the enterprise, in the runner group named by --runner-group, and a job
// whose webhook was missed is found by reconciliation.
func TestServeWithEnterpriseRunners(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	const token = "ghp_enterprise_owner"
	gh.RequireToken(token)
	gh.AddRepo("acme/app")
	gh.AddRepo("globex/app")
	gh.AddEnterprise("megacorp", "acme", "globex")
	group := gh.AddEnterpriseRunnerGroup("megacorp", "bullpen")
	dir := t.TempDir()
	runner := filepath.Join(dir, "runner.sh")
	if err := os.WriteFile(runner, []byte(fmt.Sprintf(ghRunner, gh.URL())), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BULLPEN_GITHUB_TOKEN", token)
	s := startServerWith(t, fmt.Sprintf(githubConfig, 0),
		"--github", "token", "--github-url", gh.URL()+"/", "--runner-scope", "enterprise", "--github-enterprise", "megacorp", "--runner-group", "BullPen",
		"--cloud", "local", "--local-dir", filepath.Join(dir, "machines"),
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND="+runner+" {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms", "--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s")
	gh.SendDeliveries(s.base+"/webhook", s.secret)
	l := &localStack{server: s}

	for _, repo := range []string{"acme/app", "globex/app"} {
		queued := gh.QueueJob(repo, []string{"runs-on/pool=linux"})
		j := l.waitJob(queued.ID, "completed")
		var view struct {
			RunnerName string `json:"runner_name"`
		}
		s.get(fmt.Sprintf("/api/v1/jobs/%d", j.ID), &view)
		if got := gh.RunnerGroupOf(view.RunnerName); got != group {
			t.Errorf("the runner of %s's job joined group %d, want the enterprise's bullpen group %d", repo, got, group)
		}
	}
	gh.MissNextDeliveries(1)
	missed := gh.QueueJob("globex/app", []string{"runs-on/pool=linux"})
	l.waitJob(missed.ID, "completed")

	if n := gh.Count("POST /enterprises/{enterprise}/actions/runners/generate-jitconfig"); n != 3 {
		t.Errorf("%d enterprise runners registered, want 3", n)
	}
	for _, route := range []string{"POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig", "POST /orgs/{org}/actions/runners/generate-jitconfig"} {
		if n := gh.Count(route); n != 0 {
			t.Errorf("%d runners registered with %s, want none", n, route)
		}
	}
}

// A token that cannot manage the enterprise's runners stops serve at
// start, saying what the token needs.
func TestServeRefusesATokenWithoutEnterpriseAccess(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	gh.RequireToken("ghp_org_admin")
	gh.AddRepo("acme/app") // no enterprise: GitHub answers 404
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", "../../examples/runs-on.yml", "--store", "sqlite://"+filepath.Join(t.TempDir(), "b.db"),
		"--listen", "127.0.0.1:0", "--github", "token", "--github-url", gh.URL()+"/", "--cloud", "local", "--local-dir", t.TempDir(),
		"--runner-scope", "enterprise", "--github-enterprise", "megacorp")
	cmd.Env = append(os.Environ(), "BULLPEN_WEBHOOK_SECRET=s", "BULLPEN_ADMIN_TOKEN=enterprise-admin-token", "BULLPEN_GITHUB_TOKEN=ghp_org_admin")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("serve started with a token that cannot manage the enterprise's runners")
	}
	for _, want := range []string{`cannot manage the runners of enterprise "megacorp"`, "manage_runners:enterprise"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("message lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "ghp_org_admin") {
		t.Errorf("the token is in the message:\n%s", out)
	}
}
