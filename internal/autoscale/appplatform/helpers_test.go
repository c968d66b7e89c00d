package appplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/autoscale/appplatform/fakedo"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// Credentials the fakes require: they must reach the APIs and never a log.
const (
	testGitHubToken = "ghp_TESTSECRETgithubtoken0123456789"
	testDOToken     = "dop_v1_TESTSECRETdigitaloceantoken"
	testRepo        = "acme/app"
	testPrefix      = "do-runner-"
)

var epoch = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// rig is a scaler wired to a fake GitHub and a fake App Platform on a
// virtual clock.
type rig struct {
	t      *testing.T
	gh     *fakegh.Server
	do     *fakedo.Server
	clk    *clock.Virtual
	appID  string
	env    map[string]string
	cfg    Config
	reg    *prometheus.Registry
	logs   *testlog.Buffer
	scaler *Scaler
}

// testSpec is an app with the runner worker, another worker, a service,
// secrets, and a field this godo version does not model, all of which an
// update must keep.
func testSpec() map[string]any {
	return map[string]any{
		"name":   "gh-runners",
		"region": "nyc",
		"workers": []any{
			map[string]any{
				"name":               "runner",
				"instance_count":     1,
				"instance_size_slug": "apps-s-1vcpu-1gb",
				"image":              map[string]any{"registry_type": "GHCR", "registry": "acme", "repository": "runner", "tag": "2.328.0"},
				"envs": []any{
					map[string]any{"key": "RUNNER_NAME_PREFIX", "value": testPrefix, "scope": "RUN_TIME"},
					map[string]any{"key": "ACCESS_TOKEN", "value": "EV[1:encrypted]", "type": "SECRET", "scope": "RUN_TIME"},
				},
			},
			map[string]any{"name": "janitor", "instance_count": 2, "instance_size_slug": "apps-s-1vcpu-0.5gb"},
		},
		"services":       []any{map[string]any{"name": "status", "http_port": 8080, "instance_count": 1}},
		"future_setting": map[string]any{"enabled": true, "level": 3},
	}
}

// newRig starts the fakes and a scaler configured through the
// environment, with env overriding the defaults.
func newRig(t *testing.T, env map[string]string) *rig {
	t.Helper()
	r := &rig{t: t, gh: fakegh.New(), do: fakedo.New(), clk: clock.NewVirtual(epoch), reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	t.Cleanup(r.gh.Close)
	t.Cleanup(r.do.Close)
	r.gh.SetClock(r.clk)
	r.do.SetClock(r.clk)
	r.gh.RequireToken(testGitHubToken)
	r.do.RequireToken(testDOToken)
	r.gh.AddRepo(testRepo)
	r.appID = r.do.AddApp(testSpec())
	r.env = map[string]string{
		EnvGitHubToken: testGitHubToken, EnvDOToken: testDOToken, EnvAppID: r.appID,
		EnvOwner: "acme", EnvRepo: "app", EnvRunnerNamePrefix: testPrefix,
		EnvGitHubAPIURL: r.gh.URL(), EnvDOAPIURL: r.do.URL(),
	}
	for k, v := range env {
		if v == "" {
			delete(r.env, k)
		} else {
			r.env[k] = v
		}
	}
	cfg, err := ConfigFromEnv(func(k string) string { return r.env[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	r.cfg = cfg
	r.scaler = r.newScaler(nil)
	return r
}

func (r *rig) newScaler(onCycle func(CycleReport, error)) *Scaler {
	r.t.Helper()
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(r.cfg, Deps{Clock: r.clk, Log: log, Registerer: r.reg, OnCycle: onCycle})
	if err != nil {
		r.t.Fatalf("new scaler: %v", err)
	}
	return s
}

// cycle runs one cycle at the virtual clock's now.
func (r *rig) cycle() (CycleReport, error) {
	r.t.Helper()
	return r.scaler.Cycle(context.Background(), r.clk.Now())
}

// advanceCycle moves the clock by d and runs a cycle.
func (r *rig) advanceCycle(d time.Duration) (CycleReport, error) {
	r.t.Helper()
	r.clk.Advance(d)
	return r.cycle()
}

// queue queues n self-hosted jobs in the test repository.
func (r *rig) queue(n int) []domain.GitHubJob {
	jobs := make([]domain.GitHubJob, n)
	for i := range jobs {
		jobs[i] = r.gh.QueueJob(testRepo, []string{"self-hosted", "linux", "x64"})
	}
	return jobs
}

// cycleOnFourJobs starts a rig on env with four jobs queued, lets arrange
// (when not nil) set up what the case is about, and runs one cycle.
func cycleOnFourJobs(t *testing.T, env map[string]string, arrange func(*rig)) (*rig, CycleReport, error) {
	t.Helper()
	r := newRig(t, env)
	r.queue(4)
	if arrange != nil {
		arrange(r)
	}
	rep, err := r.cycle()
	return r, rep, err
}

func (r *rig) count() int { return r.do.WorkerCount(r.appID, "runner") }

// workerField reads a field of a worker of the app's current spec.
func (r *rig) workerField(worker, field string) any {
	workers, _ := r.do.Spec(r.appID)["workers"].([]any)
	for _, w := range workers {
		m := w.(map[string]any)
		if m["name"] == worker {
			return m[field]
		}
	}
	return nil
}

// noSecrets fails the test if a log line or text holds a token.
func (r *rig) noSecrets(texts ...string) {
	r.t.Helper()
	for _, text := range append(texts, r.logs.String()) {
		for _, secret := range []string{testGitHubToken, testDOToken} {
			if strings.Contains(text, secret) {
				r.t.Fatalf("a token leaked: %s", text)
			}
		}
	}
}

// setWorkerField is a change another writer makes to a worker.
func setWorkerField(worker, field string, value any) func(map[string]any) {
	return func(spec map[string]any) {
		for _, w := range spec["workers"].([]any) {
			if m := w.(map[string]any); m["name"] == worker {
				m[field] = value
			}
		}
	}
}

// canonical is the spec as JSON with sorted keys: equal specs, equal text.
func canonical(spec map[string]any) string {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Sprintf("unencodable spec: %v", err)
	}
	return string(b)
}
