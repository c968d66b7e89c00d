package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// restarts starts apps on one configuration file and one store, as a
// replica restarted on its machine does.
type restarts struct {
	t           *testing.T
	path, store string
	clk         *clock.Virtual
}

func newRestarts(t *testing.T) *restarts {
	return &restarts{t: t, path: filepath.Join(t.TempDir(), "runs-on.yml"), store: sqlitetest.Path(t),
		clk: clock.NewVirtual(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))}
}

func (r *restarts) write(text string) {
	r.t.Helper()
	writeSettled(r.t, r.path, text)
}

// start builds an app as serve does when it could not use the file
// itself: with no configuration given, for the app to read the file.
func (r *restarts) start(logs *testlog.Buffer) (*App, error) {
	a, err := New(context.Background(), Options{ConfigPath: r.path, StorePath: r.store, WebhookSecret: "secret", AdminToken: "token",
		Clock: r.clk, Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err == nil {
		r.t.Cleanup(func() { a.Close() })
	}
	return a, err
}

// A replica restarted while its file does not validate, or cannot be
// read, serves the file last put in force, as the store keeps it, and
// reports the file's problem as a reload does; the next file that
// validates replaces it, and is what the next start falls back on.
func TestAStartOnAFileItCannotUseServesTheFileLastInForce(t *testing.T) {
	r := newRestarts(t)
	r.write(linuxPool)
	a, err := r.start(&testlog.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	r.clk.Advance(time.Hour)
	r.write(unknownRunner)
	var logs testlog.Buffer
	a, err = r.start(&logs)
	if err != nil {
		t.Fatalf("a start on an invalid file, with the store keeping a valid one: %v", err)
	}
	if _, ok := a.Config().Pool("linux"); !ok {
		t.Fatalf("serving %v, want the file last in force", a.Config().PoolsFor(""))
	}
	if ref := a.configs.Status().Refused; ref == nil || ref.Unreadable() || !strings.Contains(fmt.Sprint(ref.Problems), "large") {
		t.Errorf("the dashboard shows %+v as refused, want the invalid file's problem", ref)
	}
	if got := testutil.ToFloat64(a.configReloads.refused); got != 1 {
		t.Errorf("bullpen_config_refused %v, want 1", got)
	}
	for _, want := range []string{"level=WARN msg=\"starting on the configuration last put in force", "put_in_force=2026-11-27T09:00:00Z", "level=ERROR msg=\"configuration invalid"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}

	r.clk.Advance(time.Minute)
	r.write(windowsPool)
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Config().Pool("windows"); !ok || testutil.ToFloat64(a.configReloads.refused) != 0 {
		t.Fatalf("after the file was mended: serving %v, refused %v", a.Config().PoolsFor(""), testutil.ToFloat64(a.configReloads.refused))
	}
	a.Close()

	if err := os.Remove(r.path); err != nil {
		t.Fatal(err)
	}
	a, err = r.start(&testlog.Buffer{})
	if err != nil {
		t.Fatalf("a start on a missing file, with the store keeping a valid one: %v", err)
	}
	if _, ok := a.Config().Pool("windows"); !ok {
		t.Fatalf("serving %v, want the mended file", a.Config().PoolsFor(""))
	}
	if ref := a.configs.Status().Refused; ref == nil || !ref.Unreadable() {
		t.Errorf("the dashboard shows %+v, want the read failure", ref)
	}
}

// With nothing to fall back on, a start says what is wrong with the file
// and why the store could not help.
func TestAStartWithNothingToServeNamesBothProblems(t *testing.T) {
	r := newRestarts(t)
	r.write(unknownRunner)
	_, err := r.start(&testlog.Buffer{})
	if !errors.Is(err, ErrNoConfiguration) || !strings.Contains(err.Error(), "large") || !strings.Contains(err.Error(), "the store keeps none from "+r.path) {
		t.Fatalf("start on an invalid file and an empty store: %v", err)
	}

	// A file kept from an older version that this one refuses.
	st, err := sqlite.Open(t.Context(), r.store, r.clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutConfiguration(t.Context(), domain.ConfigRecord{Source: r.path, Data: []byte("pools: ["), At: r.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err = r.start(&testlog.Buffer{})
	if !errors.Is(err, ErrNoConfiguration) || !strings.Contains(err.Error(), "large") || !strings.Contains(err.Error(), "is invalid too") {
		t.Fatalf("start on an invalid file and an invalid record: %v", err)
	}
}
