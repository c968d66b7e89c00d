package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// repoFile is a GitHub answering for one token: who it is, and one file
// of a repository, with an ETag.
type repoFile struct {
	mu    sync.Mutex
	body  string
	reads int
}

func (f *repoFile) set(body string) { f.mu.Lock(); f.body = body; f.mu.Unlock() }

func (f *repoFile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer gh-token" {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/user":
		fmt.Fprint(w, `{"login":"bullpen-bot","id":1}`)
	case "/repos/acme/.github-private/contents/.github/runs-on.yml":
		f.reads++
		etag := fmt.Sprintf(`"%x"`, sha256.Sum256([]byte(f.body)))
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		fmt.Fprint(w, f.body)
	default:
		http.NotFound(w, r)
	}
}

// A configuration kept in a repository is read at start, and again at
// once when a push to its branch comes.
func TestConfigurationFromARepositoryFollowsPushes(t *testing.T) {
	gh := &repoFile{body: example}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	o := app.Options{ConfigPath: "github://acme/.github-private/.github/runs-on.yml", StorePath: sqlitetest.Path(t),
		WebhookSecret: "secret", AdminToken: "token", GitHub: "token", Cloud: "local", LocalDir: t.TempDir(),
		GitHubAPI: app.GitHubAPI{URL: srv.URL + "/", Token: "gh-token"},
		Clock:     clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), Log: slog.New(slog.DiscardHandler)}
	a, err := app.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, ok := a.Config().Pool("linux"); !ok {
		t.Fatal("the repository's configuration was not read at start")
	}
	gh.set(strings.Replace(example, "linux:", "windows:", 1))
	push := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/.github-private","default_branch":"main"}}`)
	mac := hmac.New(sha256.New, []byte("secret"))
	mac.Write(push)
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(string(push)))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "p-1")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	a.Webhook.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("push: %d %s", rec.Code, rec.Body)
	}
	// The read runs beside the delivery's answer, against a real server:
	// only polling can tell when it is done.
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := a.Config().Pool("windows"); !ok; _, ok = a.Config().Pool("windows") {
		if time.Now().After(deadline) {
			t.Fatal("the pushed configuration was not read")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestARepositoryTheCredentialsCannotReadStopsTheStart(t *testing.T) {
	srv := httptest.NewServer(&repoFile{body: example})
	defer srv.Close()
	o := app.Options{ConfigPath: "github://acme/missing/runs-on.yml", StorePath: sqlitetest.Path(t),
		WebhookSecret: "secret", AdminToken: "token", GitHub: "token", Cloud: "local", LocalDir: t.TempDir(),
		GitHubAPI: app.GitHubAPI{URL: srv.URL + "/", Token: "gh-token"},
		Clock:     clock.NewVirtual(time.Now()), Log: slog.New(slog.DiscardHandler)}
	_, err := app.New(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "github://acme/missing/runs-on.yml") || !strings.Contains(err.Error(), "contents: read") {
		t.Fatalf("error %v, want the location and the permission it needs", err)
	}
}
