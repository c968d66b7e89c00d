package installations_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/installations"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

const appID = 4242

// twoAccounts is a fake GitHub where the App is installed on acme (101)
// and globex (102), and not on initech.
func twoAccounts(t *testing.T) (*fakegh.Server, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	gh.RequireApp(appID, 100, &key.PublicKey)
	gh.AddInstallation(101, "acme")
	gh.AddInstallation(102, "globex")
	for _, r := range []string{"acme/app", "globex/app", "initech/app"} {
		gh.AddRepo(r)
	}
	return gh, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// appOnVirtualClock is the App of twoAccounts on a virtual clock that the
// fake GitHub shares, started near the wall clock, which signs the JWTs.
func appOnVirtualClock(t *testing.T) (*fakegh.Server, *installations.GitHub, *clock.Virtual) {
	t.Helper()
	gh, key := twoAccounts(t)
	clk := clock.NewVirtual(time.Now().Truncate(time.Second))
	gh.SetClock(clk)
	g, err := installations.New(installations.Options{BaseURL: gh.URL() + "/", AppID: appID, PrivateKey: key,
		Clock: clk, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return gh, g, clk
}

func newApp(t *testing.T, gh *fakegh.Server, id int64, key []byte) *installations.GitHub {
	t.Helper()
	g, err := installations.New(installations.Options{BaseURL: gh.URL() + "/", AppID: id, PrivateKey: key,
		Client: rest.Options{}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Each account's calls carry its own installation's token.
func TestEachAccountUsesItsInstallation(t *testing.T) {
	gh, key := twoAccounts(t)
	g := newApp(t, gh, appID, key)
	ctx := context.Background()
	if slug, err := g.Check(ctx); err != nil || slug == "" {
		t.Fatalf("check: %q, %v", slug, err)
	}
	for i, tc := range []struct {
		owner string
		want  int64
	}{{"acme", 101}, {"globex", 102}, {"ACME", 101}} {
		name := fmt.Sprintf("runner-%d-%s", i, tc.owner)
		if _, err := g.RegisterRunner(ctx, domain.Scope{Owner: tc.owner, Repo: "app"}, name, []string{"linux"}); err != nil {
			t.Fatalf("register on %s: %v", tc.owner, err)
		}
		if got := gh.RunnerInstallation(name); got != tc.want {
			t.Errorf("runner of %s registered by installation %d, want %d", tc.owner, got, tc.want)
		}
	}
	_, err := g.RegisterRunner(ctx, domain.Scope{Owner: "initech", Repo: "app"}, "r", []string{"linux"})
	if !errors.Is(err, installations.ErrNotInstalled) || !strings.Contains(err.Error(), "initech") {
		t.Fatalf("an account without the App: %v", err)
	}
	gh.SuspendInstallation(102)
	suspended := newApp(t, gh, appID, key)
	if _, err := suspended.ListRunners(ctx, domain.Scope{Owner: "globex", Repo: "app"}); !errors.Is(err, installations.ErrNotInstalled) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("a suspended installation: %v", err)
	}
}

func TestBadCredentialsSayWhatToFix(t *testing.T) {
	gh, key := twoAccounts(t)
	if _, err := installations.New(installations.Options{BaseURL: gh.URL(), AppID: appID, PrivateKey: []byte("not a key")}); err == nil ||
		!strings.Contains(err.Error(), "not a PEM RSA key") || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("a key that is not PEM: %v", err)
	}
	if _, err := newApp(t, gh, 999, key).Check(context.Background()); err == nil || !strings.Contains(err.Error(), "--github-app-id 999") {
		t.Fatalf("an App id that is not the key's: %v", err)
	}
}

// A JWT GitHub refuses for this machine's clock is not blamed on the App
// id and key alone: GitHub's reason is in the error.
func TestCheckSaysWhyGitHubRefusedTheJWT(t *testing.T) {
	gh, key := twoAccounts(t)
	gh.SetClock(clock.NewVirtual(time.Now().Add(-20 * time.Minute))) // this machine's clock is 20 minutes fast
	_, err := newApp(t, gh, appID, key).Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "'Expiration time' claim ('exp') is too far in the future") || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("a JWT from a clock 20 minutes fast: %v, want GitHub's reason and a word about the clock", err)
	}
}

// A secondary limit without retry-after on the App's own calls pauses
// them a minute on bullpen's clock, not until the primary limit's reset.
func TestASecondaryLimitPausesTheAppsCallsAMinute(t *testing.T) {
	gh, key := twoAccounts(t)
	clk := clock.NewVirtual(time.Now().Truncate(time.Second)) // near the wall clock, which signs the JWTs
	gh.SetClock(clk)
	gh.SecondaryRetryAfter(0)
	gh.FailNext("GET /orgs/{org}/installation", http.StatusTooManyRequests, 1)
	g, err := installations.New(installations.Options{BaseURL: gh.URL() + "/", AppID: appID, PrivateKey: key,
		Clock: clk, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		clk.Advance(wait)
		if err := g.CheckAccount(ctx, "acme"); !errors.Is(err, domain.ErrRateLimited) {
			t.Fatalf("%s into the limit: %v, want a rate limit", wait, err)
		}
	}
	if n := gh.Count("GET /orgs/{org}/installation"); n != 1 {
		t.Errorf("%d lookups reached GitHub within the minute, want 1", n)
	}
	clk.Advance(30 * time.Second)
	if err := g.CheckAccount(ctx, "acme"); err != nil {
		t.Fatalf("a minute later: %v", err)
	}
}

// A configuration file is read with the account's installation, and an
// unchanged one costs a 304.
func TestConfigurationReadWithTheInstallation(t *testing.T) {
	gh, key := twoAccounts(t)
	gh.PutFile("acme/.github-private", ".github/runs-on.yml", "pools: {}\n")
	g := newApp(t, gh, appID, key)
	src := &configsource.GitHubFile{At: configsource.Location{Owner: "acme", Repo: ".github-private", Path: ".github/runs-on.yml"},
		BaseURL: g.BaseURL(), Client: g.HTTPClient}
	ctx := context.Background()
	if data, changed, err := src.Read(ctx); err != nil || !changed || string(data) != "pools: {}\n" {
		t.Fatalf("first read: %q %t %v", data, changed, err)
	}
	if _, changed, err := src.Read(ctx); err != nil || changed {
		t.Fatalf("second read: changed %t, %v", changed, err)
	}
	other := &configsource.GitHubFile{At: configsource.Location{Owner: "globex", Repo: "app", Path: "runs-on.yml"},
		BaseURL: g.BaseURL(), Client: g.HTTPClient}
	if _, _, err := other.Read(ctx); !errors.Is(err, configsource.ErrNotFound) {
		t.Fatalf("a file that does not exist: %v", err)
	}
}

// A secondary rate limit met by one installation pauses its calls only:
// none reaches GitHub until the pause ends, and other accounts go on.
func TestASecondaryLimitPausesOneInstallation(t *testing.T) {
	gh, key := twoAccounts(t)
	g := newApp(t, gh, appID, key)
	ctx := context.Background()
	gh.FailNext("POST /repos/acme/app/actions/runners/generate-jitconfig", http.StatusTooManyRequests, 1)
	acme := domain.Scope{Owner: "acme", Repo: "app"}
	if _, err := g.RegisterRunner(ctx, acme, "r1", []string{"linux"}); !errors.Is(err, domain.ErrRateLimited) {
		t.Fatalf("the limited call: %v", err)
	}
	before := gh.Count("POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig")
	if _, err := g.RegisterRunner(ctx, acme, "r2", []string{"linux"}); !errors.Is(err, domain.ErrRateLimited) {
		t.Fatalf("during the pause: %v", err)
	}
	if after := gh.Count("POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig"); after != before {
		t.Fatalf("%d calls reached GitHub during the pause", after-before)
	}
	if _, err := g.RegisterRunner(ctx, domain.Scope{Owner: "globex", Repo: "app"}, "r3", []string{"linux"}); err != nil {
		t.Fatalf("another installation during acme's pause: %v", err)
	}
}

// Reconciliation covers every repository of every installation, listed
// with each installation's own token, once an hour.
func TestRepositoriesOfEveryInstallation(t *testing.T) {
	gh, key := twoAccounts(t)
	gh.AddRepo("acme/infra")
	g := newApp(t, gh, appID, key)
	got, err := g.Repositories(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Owner+"/"+s.Repo)
	}
	slices.Sort(names)
	if want := []string{"acme/app", "acme/infra", "globex/app"}; !slices.Equal(names, want) {
		t.Fatalf("repositories %v, want %v (initech has no installation)", names, want)
	}
	if _, err := g.Repositories(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := gh.Count("GET /app/installations"); n != 1 {
		t.Fatalf("the installations were listed %d times within the hour", n)
	}
}

// An installation limited to some repositories reaches only those: its
// list holds them alone, and a runner cannot be registered elsewhere.
func TestAnInstallationOfSelectedRepositories(t *testing.T) {
	gh, key := twoAccounts(t)
	gh.AddRepo("acme/infra")
	gh.SelectRepositories(101, "acme/app")
	g := newApp(t, gh, appID, key)
	ctx := context.Background()
	got, err := g.Repositories(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s.Owner == "acme" && s.Repo != "app" {
			t.Errorf("repository %s/%s listed, though not selected", s.Owner, s.Repo)
		}
	}
	if _, err := g.RegisterRunner(ctx, domain.Scope{Owner: "acme", Repo: "infra"}, "r-infra", []string{"linux"}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a runner in a repository not selected: %v", err)
	}
	if _, err := g.RegisterRunner(ctx, domain.Scope{Owner: "acme", Repo: "app"}, "r-app", []string{"linux"}); err != nil {
		t.Fatalf("a runner in the selected repository: %v", err)
	}
}

// While GitHub fails to answer, an installation found before is still
// used (GitHub failing says nothing about it), and an account's lookup is
// not repeated for every job that arrives.
func TestALookupGitHubFailsIsRememberedBrieflyAndKeepsTheOneFound(t *testing.T) {
	gh, g, clk := appOnVirtualClock(t)
	ctx := context.Background()
	if err := g.CheckAccount(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour + time.Second) // the installation found is due to be confirmed
	const lookup = "GET /orgs/{org}/installation"
	gh.FailNext(lookup, http.StatusBadGateway, 1000)
	if err := g.CheckAccount(ctx, "acme"); err != nil {
		t.Fatalf("GitHub failing to confirm an installation found before: %v, want it kept", err)
	}

	if err := g.CheckAccount(ctx, "globex"); err == nil || errors.Is(err, installations.ErrNotInstalled) {
		t.Fatalf("GitHub failing: %v, want a failure that is not a missing installation", err)
	}
	first := gh.Count(lookup)
	for range 5 {
		clk.Advance(2 * time.Second)
		if err := g.CheckAccount(ctx, "globex"); err == nil || errors.Is(err, installations.ErrNotInstalled) {
			t.Fatalf("GitHub failing: %v, want the failure again", err)
		}
	}
	if n := gh.Count(lookup); n != first {
		t.Fatalf("%d lookups reached GitHub in 10 s after the first failed, want none: the failure is kept a while", n-first)
	}
	clk.Advance(10 * time.Second)
	_ = g.CheckAccount(ctx, "globex")
	if n := gh.Count(lookup); n == first {
		t.Fatal("20 s after the failure, the lookup was not tried again")
	}
}

// A lookup its caller gave up on (the intake's short deadline) is not kept:
// the next caller asks GitHub.
func TestALookupItsCallerGaveUpOnIsNotKept(t *testing.T) {
	_, g, clk := appOnVirtualClock(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.CheckAccount(ctx, "acme"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a lookup cancelled by its caller: %v", err)
	}
	clk.Advance(time.Second)
	if err := g.CheckAccount(context.Background(), "acme"); err != nil {
		t.Fatalf("the next caller: %v, want GitHub asked again", err)
	}
}
