package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

const example = `
runners:
  small:
    image: ubuntu-24.04
    cpu: 2
    ram: 4
pools:
  linux:
    runner: small
    schedule:
      - name: default
        hot: 1
      - name: office
        match:
          time: ["08:00", "18:00"]
        hot: 3
`

func newApp(t *testing.T, o app.Options) *app.App {
	t.Helper()
	cfg, err := config.Parse("runs-on.yml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	o.Config, o.StorePath, o.WebhookSecret, o.AdminToken = cfg, sqlitetest.Path(t), "secret", "token"
	if o.Clock == nil {
		o.Clock = clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	}
	o.Log = slog.New(slog.DiscardHandler)
	a, err := app.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// The embedded default builds the whole simulation profile: a simulated
// GitHub, cloud and agents.
func TestTheEmbeddedDefaultIsTheSimulationProfile(t *testing.T) {
	a := newApp(t, app.Options{})
	if a.Sim.GitHub == nil || a.Sim.Cloud == nil || a.Sim.Agents == nil {
		t.Fatalf("simulation profile %+v, want GitHub, cloud and agents", a.Sim)
	}
	if a.GitHub == nil || a.Cloud == nil || a.Store == nil || a.Queue == nil {
		t.Fatal("a port has no adapter")
	}
}

func TestUnknownProvidersAreRefusedByName(t *testing.T) {
	for _, o := range []app.Options{{Cloud: "ec3"}, {GitHub: "gitlab"}} {
		cfg, _ := config.Parse("runs-on.yml", []byte(example))
		o.Config, o.StorePath, o.WebhookSecret, o.AdminToken = cfg, sqlitetest.Path(t), "s", "t"
		o.Clock = clock.NewVirtual(time.Now())
		if _, err := app.New(context.Background(), o); err == nil {
			t.Fatalf("options %+v accepted", o)
		}
	}
}

// Options a real provider cannot work with are refused at once, each
// problem named.
func TestRealProvidersNeedTheirSettings(t *testing.T) {
	for _, tc := range []struct {
		o    app.Options
		want []string
	}{
		{app.Options{GitHub: "app", Cloud: "local"}, []string{"an App id and its private key are required"}},
		{app.Options{GitHub: "token", Cloud: "local"}, []string{"no token"}},
		{app.Options{GitHub: "token", GitHubAPI: app.GitHubAPI{Token: "t"}}, []string{"the simulated cloud's agents cannot run a real GitHub's jobs"}},
		{app.Options{Cloud: "aws"}, []string{"aws: no region", "aws: no subnet"}},
		{app.Options{RunnerScope: "enterprise"}, []string{"runner scope enterprise needs the enterprise's slug (--github-enterprise)"}},
		{app.Options{RunnerScope: "enterprise", Enterprise: "megacorp", GitHub: "app", Cloud: "local", GitHubAPI: app.GitHubAPI{AppID: 1, PrivateKey: []byte("k")}},
			[]string{"runner scope enterprise needs --github token", "never an App's installation token"}},
		{app.Options{Enterprise: "megacorp"}, []string{`an enterprise ("megacorp") is named but the runner scope is repo`}},
		{app.Options{RunnerScope: "global"}, []string{`runner scope "global": want repo, org or enterprise`}},
		{app.Options{Cloud: "aws", AWS: app.AWS{Region: "eu-west-1", Subnets: []string{"subnet-1"}, AgentURL: "https://x/bullpen"}},
			[]string{"--aws-agent-url and --aws-agent-sha256 go together"}},
	} {
		cfg, _ := config.Parse("runs-on.yml", []byte(example))
		o := tc.o
		o.Config, o.StorePath, o.WebhookSecret, o.AdminToken = cfg, sqlitetest.Path(t), "s", "t"
		o.Clock = clock.NewVirtual(time.Now())
		_, err := app.New(context.Background(), o)
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: error %v, want it to say %q", tc.o, err, want)
			}
		}
	}
}

// runProbeLoop runs one healthy loop, "probe", on a's loops until the
// test ends, and returns once it has started.
func runProbeLoop(t *testing.T, a *app.App) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	started := make(chan struct{})
	probe := loop.Loop{Name: "probe", Step: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return nil
	}}
	go func() { done <- a.Loops.Run(ctx, probe) }()
	t.Cleanup(func() { stop(); <-done })
	<-started
}

// /healthz answers with every loop's status.
func TestHealthReportsTheLoops(t *testing.T) {
	a := newApp(t, app.Options{})
	runProbeLoop(t, a)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var body struct {
		Store string        `json:"store"`
		Loops []loop.Status `json:"loops"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("status %d body %s (%v)", rec.Code, rec.Body, err)
	}
	if body.Store != "ok" || len(body.Loops) != 1 || body.Loops[0].Name != "probe" || !body.Loops[0].Healthy {
		t.Fatalf("health %+v", body)
	}
}

// A probe or scraper that asks /healthz or /metrics with another method is
// told which methods they take, not handed the dashboard's page.
func TestProbesAnswerOtherMethodsWithTheMethodsTheyTake(t *testing.T) {
	a := newApp(t, app.Options{})
	for _, path := range []string{"/healthz", "/metrics"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" ||
				!strings.Contains(rec.Body.String(), method+" "+path) || strings.Contains(rec.Body.String(), "<html") {
				t.Errorf("%s %s: %d, Allow %q, body %q", method, path, rec.Code, rec.Header().Get("Allow"), rec.Body)
			}
		}
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodHead, path, nil))
		if rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable {
			t.Errorf("HEAD %s: %d", path, rec.Code)
		}
	}
}

// A server on one address has one health check, which a load balancer
// uses too: it says 503, draining, once a shutdown has started.
func TestHealthSaysDrainingOnceAShutdownStarts(t *testing.T) {
	a := newApp(t, app.Options{})
	runProbeLoop(t, a)
	a.Draining()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"draining":true`) {
		t.Fatalf("status %d body %s, want 503 draining", rec.Code, rec.Body)
	}
}

// The status API says when each pool's schedule next changes its target.
func TestPoolsShowTheNextScheduleChange(t *testing.T) {
	a := newApp(t, app.Options{}) // the clock starts at 09:00 UTC, inside "office"
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pools", nil)
	req.Header.Set("Authorization", "Bearer token")
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	var body struct {
		Pools []struct {
			Name         string    `json:"name"`
			NextChange   time.Time `json:"next_change"`
			NextSchedule string    `json:"next_schedule"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Pools) != 1 {
		t.Fatalf("status %d body %s (%v)", rec.Code, rec.Body, err)
	}
	p := body.Pools[0]
	if want := time.Date(2026, 11, 24, 18, 0, 0, 0, time.UTC); !p.NextChange.Equal(want) || p.NextSchedule != "default" {
		t.Fatalf("next change %s to %q, want %s to default", p.NextChange, p.NextSchedule, want)
	}
}

// The served API knows the viewer token (403, not a wrong guess that
// throttles the address for the admin) and answers every path under /api
// in JSON, /api/v1 itself included.
func TestTheServedAPIKnowsTheViewerAndAnswersInJSON(t *testing.T) {
	a := newApp(t, app.Options{ViewerToken: "viewer-token-of-the-team"})
	call := func(path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, req)
		return rec
	}
	for range 20 {
		if rec := call("/api/v1/jobs", "viewer-token-of-the-team"); rec.Code != http.StatusForbidden {
			t.Fatalf("the viewer token on the API: %d %s, want 403", rec.Code, rec.Body)
		}
	}
	if rec := call("/api/v1/pools", "token"); rec.Code != http.StatusOK {
		t.Fatalf("the admin token after the viewer's calls: %d %s, want 200", rec.Code, rec.Body)
	}
	for _, path := range []string{"/api/v1", "/api"} {
		rec := call(path, "token")
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || rec.Code/100 != 4 {
			t.Errorf("%s: %d %s, want a JSON error", path, rec.Code, ct)
		}
	}
}
