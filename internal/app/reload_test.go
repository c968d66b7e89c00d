package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// writeSettled writes a settings file dated a minute back, as one left
// alone since it was written: a reload takes only a file that has settled
// (configsource.File), and these tests reload at once.
func writeSettled(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	then := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, then, then); err != nil {
		t.Fatal(err)
	}
}

// appOnFile is an app whose configuration is the file holding text, and a
// function that rewrites that file.
func appOnFile(t *testing.T, text string) (*App, func(string)) {
	t.Helper()
	a, write, _ := appOnLoggedFile(t, text)
	return a, write
}

// appOnLoggedFile is appOnFile with the app's log.
func appOnLoggedFile(t *testing.T, text string) (*App, func(string), *testlog.Buffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runs-on.yml")
	write := func(s string) { writeSettled(t, path, s) }
	write(text)
	cfg, err := config.Parse(path, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	a, err := New(context.Background(), Options{Config: cfg, ConfigPath: path, StorePath: sqlitetest.Path(t), WebhookSecret: "secret", AdminToken: "token",
		Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, write, &logs
}

// An empty file, as a write that is not atomic leaves it for a moment, is
// not put in force: it would drain every pool. An explicit empty pools
// section is.
func TestAnEmptyConfigurationFileIsNotPutInForce(t *testing.T) {
	a, write := appOnFile(t, "runners:\n  small: {image: ubuntu-24.04}\npools:\n  linux:\n    runner: small\n    schedule: [{name: default, hot: 1}]\n")
	for _, empty := range []string{"", "\n  \n", "# being rewritten\n"} {
		write(empty)
		if err := a.reloadConfig(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.Config().Pool("linux"); !ok {
			t.Fatalf("a file holding %q was put in force", empty)
		}
	}
	write("pools: {}\n")
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Config().Pool("linux"); ok {
		t.Fatal("pools: {} did not remove the pool")
	}
}

// A file whose pools all belong to other environments is most likely read
// with the wrong --environment: the reload says which pools it serves and
// warns that it serves none.
func TestAConfigurationOfOtherEnvironmentsIsWarnedAbout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs-on.yml")
	const shared = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  all:\n    runner: small\n  mine:\n    runner: small\n    environment: production\n"
	const others = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  a:\n    runner: small\n    environment: dev\n  b:\n    runner: small\n    environment: staging\n"
	cfg, err := config.Parse(path, []byte(shared))
	if err != nil {
		t.Fatal(err)
	}
	writeSettled(t, path, shared)
	var logs testlog.Buffer
	a, err := New(context.Background(), Options{Config: cfg, ConfigPath: path, StorePath: sqlitetest.Path(t), WebhookSecret: "secret", AdminToken: "token",
		Environment: "production", Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)),
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, step := range []struct {
		file, info string
		warns      bool
	}{
		{shared + "# edited\n", `pools=2 served=all,mine other_environments=""`, false},
		{others, `pools=0 served="" other_environments=a@dev,b@staging`, true},
	} {
		writeSettled(t, path, step.file)
		before := len(logs.Lines("level=WARN", "environment=production"))
		if err := a.reloadConfig(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := logs.Lines("configuration reloaded", step.info); len(got) != 1 {
			t.Errorf("no reload line with %s in:\n%s", step.info, logs.String())
		}
		if warned := len(logs.Lines("level=WARN", "environment=production")) > before; warned != step.warns {
			t.Errorf("after the reload of a file with %s, warned %v, want %v:\n%s", step.info, warned, step.warns, logs.String())
		}
	}
}

// Each configuration read that finds something to act on is counted by
// result, and bullpen_config_refused stays 1 while the newest file read is
// invalid, so that an alert holds for as long as a human must fix it.
func TestConfigurationReadsAreCountedByResult(t *testing.T) {
	const valid = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  linux:\n    runner: small\n"
	a, write := appOnFile(t, valid)
	if n, err := testutil.GatherAndCount(a.Registry(), "bullpen_config_reloads_total", "bullpen_config_refused"); err != nil || n != 4 {
		t.Fatalf("%d series before any reload, %v; want each result and the gauge at zero", n, err)
	}
	for _, step := range []struct {
		file                        string // "" removes it
		loaded, refused, unreadable float64
		refusedNow                  float64
	}{
		{"pools: [not, a, map]\n", 0, 1, 0, 1},
		{"pools: [not, a, map]\n", 0, 1, 0, 1}, // the same bytes: not read again
		{"", 0, 1, 1, 1},                       // what the source holds is unknown
		{valid + "# fixed\n", 1, 1, 1, 0},
	} {
		if step.file == "" {
			if err := os.Remove(a.opts.ConfigPath); err != nil {
				t.Fatal(err)
			}
		} else {
			write(step.file)
		}
		_ = a.reloadConfig(t.Context()) // an unreadable file is an error; counted all the same
		reads := a.configReloads.reads
		got := []float64{testutil.ToFloat64(reads.WithLabelValues(reloadLoaded)), testutil.ToFloat64(reads.WithLabelValues(reloadRefused)),
			testutil.ToFloat64(reads.WithLabelValues(reloadUnreadable)), testutil.ToFloat64(a.configReloads.refused)}
		if want := []float64{step.loaded, step.refused, step.unreadable, step.refusedNow}; !slices.Equal(got, want) {
			t.Fatalf("after reading %q: loaded, refused, unreadable, refused now = %v, want %v", step.file, got, want)
		}
	}
}
