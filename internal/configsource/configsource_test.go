package configsource_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestParseLocation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want configsource.Location
		err  string
	}{
		{in: "github://acme/.github-private/.github/runs-on.yml", want: configsource.Location{Owner: "acme", Repo: ".github-private", Path: ".github/runs-on.yml"}},
		{in: "github://acme/infra/runs-on.yml@v2", want: configsource.Location{Owner: "acme", Repo: "infra", Path: "runs-on.yml", Ref: "v2"}},
		{in: "github://acme/infra", err: "want github://OWNER/REPO/PATH"},
		{in: "github://acme//x.yml", err: "want github://OWNER/REPO/PATH"},
		{in: "https://github.com/acme/infra", err: "not a github://"},
	} {
		got, err := configsource.ParseLocation(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %+v, %v", tc.in, got, err)
		case tc.err == "" && got.String() != tc.in:
			t.Errorf("%s: String() = %s", tc.in, got.String())
		}
	}
}

// settledFile is a File on a clock, in a new directory, and a function
// that writes it, dated ago before the clock's now.
func settledFile(t *testing.T, now time.Time) (*configsource.File, *clock.Virtual, func(s string, ago time.Duration)) {
	t.Helper()
	clk := clock.NewVirtual(now)
	path := filepath.Join(t.TempDir(), "runs-on.yml")
	write := func(s string, ago time.Duration) {
		t.Helper()
		at := clk.Now().Add(-ago)
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	return &configsource.File{Path: path, Clock: clk}, clk, write
}

func TestFileReportsChanges(t *testing.T) {
	f, _, writeDated := settledFile(t, time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	write := func(s string) { writeDated(s, time.Minute) }
	write("a")
	for i, want := range []struct {
		write   string
		changed bool
	}{{"", true}, {"", false}, {"b", true}, {"b", false}} {
		if want.write != "" {
			write(want.write)
		}
		if _, changed, err := f.Read(context.Background()); err != nil || changed != want.changed {
			t.Fatalf("read %d: changed %t, %v", i, changed, err)
		}
	}
}

// A file modified less than Settle ago may be a write caught part-way
// (scp, cat >, an editor writing in place), and what it holds then may
// validate: it is not handed over until it has been left alone that long,
// and meanwhile the contents handed over last stand, unchanged, with
// ErrNotSettled.
func TestFileHandsOverOnlySettledContents(t *testing.T) {
	const full = "runners:\n  small: {image: u}\npools:\n  linux:\n    runner: small\n"
	const edited = full + "  mac:\n    runner: small\n"
	f, clk, write := settledFile(t, time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	ctx := context.Background()
	read := func(step, want string, wantChanged bool, wantErr error) {
		t.Helper()
		data, changed, err := f.Read(ctx)
		if !errors.Is(err, wantErr) || string(data) != want || changed != wantChanged {
			t.Fatalf("%s: %q, changed %t, %v; want %q, changed %t, %v", step, data, changed, err, want, wantChanged, wantErr)
		}
	}
	write(full, time.Hour)
	read("a file left alone", full, true, nil)

	write(edited[:len(full)+8], 0)
	read("a write caught part-way", full, false, configsource.ErrNotSettled)
	clk.Advance(configsource.Settle - time.Millisecond)
	read("the same, just under the settle time later", full, false, configsource.ErrNotSettled)
	write(edited, 0)
	read("the write finished", full, false, configsource.ErrNotSettled)
	clk.Advance(configsource.Settle)
	read("the write left alone for the settle time", edited, true, nil)
	read("read again", edited, false, nil)

	// A modification time ahead of the clock is a clock that disagrees:
	// how long ago the write was cannot be told from it, so it is not
	// taken at the first read that finds it.
	write(full, -time.Hour)
	read("a file dated in the future", edited, false, configsource.ErrNotSettled)
}

// A file dated ahead of the clock (a file server's clock, cp -p or tar
// from a skewed host) is taken once two reads at least Settle apart found
// it the same, and a change between them starts the wait again.
func TestFileDatedAheadIsTakenOnceSeenSettled(t *testing.T) {
	f, clk, write := settledFile(t, time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	ctx := context.Background()
	write("a", time.Hour)
	if _, changed, err := f.Read(ctx); err != nil || !changed {
		t.Fatalf("first read: changed %t, %v", changed, err)
	}
	write("b", -time.Hour)
	if data, changed, err := f.Read(ctx); !errors.Is(err, configsource.ErrNotSettled) || changed || string(data) != "a" {
		t.Fatalf("first sight of a file dated ahead: %q, changed %t, %v; want a, unchanged, not settled", data, changed, err)
	}
	clk.Advance(configsource.Settle)
	write("bc", -time.Hour)
	if data, changed, err := f.Read(ctx); !errors.Is(err, configsource.ErrNotSettled) || changed || string(data) != "a" {
		t.Fatalf("a file dated ahead that changed since it was seen: %q, changed %t, %v; want a, unchanged, not settled", data, changed, err)
	}
	clk.Advance(configsource.Settle - time.Millisecond)
	if _, changed, err := f.Read(ctx); !errors.Is(err, configsource.ErrNotSettled) || changed {
		t.Fatalf("the same just under the settle time after: changed %t, %v; want not settled", changed, err)
	}
	clk.Advance(time.Millisecond)
	if data, changed, err := f.Read(ctx); err != nil || !changed || string(data) != "bc" {
		t.Fatalf("a file dated ahead seen the same for the settle time: %q, changed %t, %v; want bc, changed", data, changed, err)
	}
}

// Only the very first read attempt takes a file unsettled: after it
// failed (no file yet, a control plane starting on the store's copy), a
// file written just now may be a write caught part-way.
func TestFileAfterAFailedFirstReadSettles(t *testing.T) {
	f, clk, write := settledFile(t, time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	ctx := context.Background()
	if _, _, err := f.Read(ctx); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("first read of no file: %v, want it does not exist", err)
	}
	const partial = "pools:\n  linux: {runner: sm"
	write(partial, 0)
	if data, changed, err := f.Read(ctx); !errors.Is(err, configsource.ErrNotSettled) || changed || data != nil {
		t.Fatalf("a file written just now, after a failed first read: %q, changed %t, %v; want nothing, not settled", data, changed, err)
	}
	clk.Advance(configsource.Settle)
	if data, changed, err := f.Read(ctx); err != nil || !changed || string(data) != partial {
		t.Fatalf("the file left alone since: %q, changed %t, %v", data, changed, err)
	}
}

// A file in a repository is read with If-None-Match: an unchanged file is
// a 304, not a change.
func TestGitHubFileReadsConditionally(t *testing.T) {
	body, etag := "pools: {}\n", `"v1"`
	var conditional int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/repos/acme/.github-private/contents/.github/runs-on.yml" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("If-None-Match") == etag {
			conditional++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	loc, _ := configsource.ParseLocation("github://acme/.github-private/.github/runs-on.yml")
	g := &configsource.GitHubFile{At: loc, BaseURL: srv.URL + "/",
		Client: func(context.Context, string) (*http.Client, error) { return srv.Client(), nil }}
	ctx := context.Background()
	if data, changed, err := g.Read(ctx); err != nil || !changed || string(data) != body {
		t.Fatalf("first read: %q %t %v", data, changed, err)
	}
	if data, changed, err := g.Read(ctx); err != nil || changed || string(data) != body || conditional != 1 {
		t.Fatalf("second read: %q %t %v (conditional %d)", data, changed, err, conditional)
	}
	body, etag = "pools: {a: {}}\n", `"v2"`
	if data, changed, err := g.Read(ctx); err != nil || !changed || string(data) != body {
		t.Fatalf("after a push: %q %t %v", data, changed, err)
	}
	missing := &configsource.GitHubFile{At: configsource.Location{Owner: "acme", Repo: "nope", Path: "x.yml"}, BaseURL: srv.URL + "/", Client: g.Client}
	if _, _, err := missing.Read(ctx); !errors.Is(err, configsource.ErrNotFound) || !strings.Contains(err.Error(), "contents: read") {
		t.Fatalf("missing repository: %v", err)
	}
}

// A read GitHub refuses for its rate limit says so and when to read
// again; a refusal for want of permission names the permission.
func TestGitHubFileRateLimitIsNotAPermission(t *testing.T) {
	now := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	reset := now.Add(40 * time.Minute)
	tests := []struct {
		name    string
		status  int
		header  map[string]string
		message string
		until   time.Time // zero: not a rate limit
	}{
		{"primary limit spent", 403, map[string]string{"x-ratelimit-remaining": "0", "x-ratelimit-reset": fmt.Sprint(reset.Unix())},
			"API rate limit exceeded for installation.", reset},
		{"secondary limit with retry-after", 429, map[string]string{"retry-after": "30", "x-ratelimit-remaining": "4000"},
			"You have exceeded a secondary rate limit.", now.Add(30 * time.Second)},
		{"secondary limit by its message alone", 403, map[string]string{"x-ratelimit-remaining": "4000", "x-ratelimit-reset": fmt.Sprint(reset.Unix())},
			"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", now.Add(time.Minute)},
		{"no permission", 403, map[string]string{"x-ratelimit-remaining": "4000"}, "Resource not accessible by integration", time.Time{}},
	}
	for _, tc := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range tc.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(tc.status)
			fmt.Fprintf(w, `{"message":%q}`, tc.message)
		}))
		g := &configsource.GitHubFile{At: configsource.Location{Owner: "acme", Repo: "infra", Path: "runs-on.yml"}, BaseURL: srv.URL + "/",
			Client: func(context.Context, string) (*http.Client, error) { return srv.Client(), nil }, Clock: clock.NewVirtual(now)}
		_, _, err := g.Read(context.Background())
		srv.Close()
		var limit *configsource.RateLimitError
		switch {
		case tc.until.IsZero() && (errors.Is(err, domain.ErrRateLimited) || err == nil || !strings.Contains(err.Error(), "contents: read")):
			t.Errorf("%s: %v, want a refusal naming contents: read", tc.name, err)
		case !tc.until.IsZero() && (!errors.As(err, &limit) || !limit.Until.Equal(tc.until) || !errors.Is(err, domain.ErrRateLimited) ||
			strings.Contains(err.Error(), "contents: read") || !strings.Contains(err.Error(), tc.until.Format(time.RFC3339))):
			t.Errorf("%s: %v, want a rate limit until %s", tc.name, err, tc.until.Format(time.RFC3339))
		}
	}
}
