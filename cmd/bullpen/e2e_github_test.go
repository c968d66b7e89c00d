package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

const githubConfig = `runners:
  small:
    image: ubuntu24-full-x64
pools:
  linux:
    runner: small
    schedule:
      - name: default
        hot: %d
`

// ghRunner stands in for GitHub's runner on a machine: it connects to the
// fake GitHub with its just-in-time config, which hands it a queued job
// with its labels, works, and reports the job done.
const ghRunner = `#!/bin/sh
set -e
curl -sf -X POST --data "$1" "%[1]s/_fake/jit/run" >/dev/null
echo "Running job: $1"
sleep 1
curl -sf -X POST --data "$1" "%[1]s/_fake/jit/done" >/dev/null
`

// TestServeWithAGitHubApp runs serve as a GitHub App installed on two
// organisations of a fake GitHub, with machines as local processes and
// the configuration in a repository: each organisation's jobs get runners
// registered with its own installation's token, jobs whose webhook was
// missed are found (in a repository bullpen had seen, and in one it had
// not), and a configuration pushed to the repository changes a pool's
// target.
func TestServeWithAGitHubApp(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const appID = 4242
	gh.RequireApp(appID, 100, &key.PublicKey)
	gh.AddInstallation(101, "acme")
	gh.AddInstallation(102, "globex")
	gh.AddRepo("acme/app")
	gh.AddRepo("globex/app")
	gh.AddRepo("globex/never-seen") // no job of it comes by webhook
	gh.PutFile("acme/.github-private", ".github/runs-on.yml", fmt.Sprintf(githubConfig, 1))
	dir := t.TempDir()
	keyFile, runner := filepath.Join(dir, "app.pem"), filepath.Join(dir, "runner.sh")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runner, []byte(fmt.Sprintf(ghRunner, gh.URL())), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, "", "--config", "github://acme/.github-private/.github/runs-on.yml",
		"--github", "app", "--github-app-id", fmt.Sprint(appID), "--github-app-key-file", keyFile, "--github-url", gh.URL()+"/",
		"--cloud", "local", "--local-dir", filepath.Join(dir, "machines"),
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s", "--reload", "1h",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND="+runner+" {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms", "--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s")
	gh.SendDeliveries(s.base+"/webhook", s.secret)
	l := &localStack{server: s}

	// One job in each organisation: each runner is registered by the
	// organisation's own installation.
	for _, tc := range []struct {
		repo string
		want int64
	}{{"acme/app", 101}, {"globex/app", 102}} {
		queued := gh.QueueJob(tc.repo, []string{"runs-on/pool=linux"})
		j := l.waitJob(queued.ID, "completed")
		var view struct {
			RunnerName string `json:"runner_name"`
		}
		s.get(fmt.Sprintf("/api/v1/jobs/%d", j.ID), &view)
		if got := gh.RunnerInstallation(view.RunnerName); got != tc.want {
			t.Errorf("the runner of %s's job was registered by installation %d, want %d", tc.repo, got, tc.want)
		}
		if done, _ := gh.Job(queued.ID); done.Status != "completed" || done.Conclusion != "success" {
			t.Errorf("GitHub sees %s's job %s/%s", tc.repo, done.Status, done.Conclusion)
		}
	}

	// A secondary rate limit on a runner registration: the job waits and
	// is served once the limit lifts; nothing is lost.
	gh.SecondaryRetryAfter(2 * time.Second)
	gh.FailNext("POST /repos/acme/app/actions/runners/generate-jitconfig", http.StatusTooManyRequests, 1)
	const jit = "POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig"
	before := gh.Count(jit)
	limited := gh.QueueJob("acme/app", []string{"runs-on/pool=linux"})
	l.waitJob(limited.ID, "completed")
	if n := gh.Count(jit) - before; n < 2 {
		t.Errorf("%d registrations for the limited job, want the refused one and the one after", n)
	}

	// A job whose queued delivery never came: reconciliation finds it.
	gh.MissNextDeliveries(1)
	missed := gh.QueueJob("acme/app", []string{"runs-on/pool=linux"})
	l.waitJob(missed.ID, "completed")

	// A missed job in a repository no job of bullpen's ever came from: the
	// installation's repository list brings reconciliation there.
	gh.MissNextDeliveries(1)
	unseen := gh.QueueJob("globex/never-seen", []string{"runs-on/pool=linux"})
	l.waitJob(unseen.ID, "completed")

	// A job of an account the App is not installed on is rejected at once,
	// with the reason, rather than retried for ever.
	gh.AddRepo("initech/app")
	stray := gh.QueueJob("initech/app", []string{"runs-on/pool=linux"})
	var rejected struct {
		Status, Reason string
	}
	s.eventually("the stray job is rejected", 30*time.Second, func() bool {
		if l.job(stray.ID).Status != "rejected" {
			return false
		}
		s.get(fmt.Sprintf("/api/v1/jobs/%d", stray.ID), &rejected)
		return true
	})
	if !strings.Contains(rejected.Reason, "not installed") || !strings.Contains(rejected.Reason, "initech") {
		t.Errorf("rejected for %q, want the missing installation named", rejected.Reason)
	}

	// A configuration pushed to its repository is in force at once.
	gh.PutFile("acme/.github-private", ".github/runs-on.yml", fmt.Sprintf(githubConfig, 2))
	push := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/.github-private","default_branch":"main"}}`)
	req, _ := http.NewRequest(http.MethodPost, s.base+"/webhook", bytes.NewReader(push))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "push-1")
	req.Header.Set("X-Hub-Signature-256", testfixtures.GoSign(s.secret, push))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("push: %v %v", resp, err)
	}
	resp.Body.Close()
	s.eventually("the pushed target is in force", 30*time.Second, func() bool {
		var pools struct {
			Pools []struct {
				Name   string
				Target struct{ Hot int }
			}
		}
		s.get("/api/v1/pools", &pools)
		return len(pools.Pools) == 1 && pools.Pools[0].Target.Hot == 2
	})

	// Two jobs of one run with the same labels, whose runners each take
	// the other's job: GitHub allows it, and bullpen follows GitHub's
	// reports: each job is recorded on the instance whose runner ran it.
	// Both are queued at once: a runner starting between the two would
	// find only its own job.
	gh.TakeOthersJobsFirst()
	pair := gh.QueueJobs("acme/app", []string{"runs-on/pool=linux"}, 2)
	swapped := 0
	for _, queued := range pair {
		id := queued.ID
		j := l.waitJob(id, "completed")
		done, _ := gh.Job(id)
		inst, registeredFor, ok := domain.ParseRunnerName(done.RunnerName)
		if !ok || inst != j.InstanceID {
			t.Errorf("job %d ran on runner %q but is recorded on %s", id, done.RunnerName, j.InstanceID)
		}
		if registeredFor != id {
			swapped++
		}
	}
	if swapped != 2 {
		t.Errorf("%d of 2 jobs ran on the runner registered for the other, want both", swapped)
	}
}
