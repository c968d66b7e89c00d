package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// An empty file, as a write that is not atomic leaves it for a moment, is
// not put in force: it would drain every pool. An explicit empty pools
// section is.
func TestAnEmptyConfigurationFileIsNotPutInForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs-on.yml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const first = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  linux:\n    runner: small\n    schedule: [{name: default, hot: 1}]\n"
	write(first)
	cfg, err := config.Parse(path, []byte(first))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), Options{Config: cfg, ConfigPath: path, StorePath: sqlitetest.Path(t), WebhookSecret: "secret", AdminToken: "token",
		Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
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
