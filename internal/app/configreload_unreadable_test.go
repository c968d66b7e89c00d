package app

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// A source that keeps failing the same way is one failure on the
// dashboard, shown from when it began: reported again at each read, its
// time would change what the dashboard shows every reload interval. A
// failure of another kind starts anew.
func TestTheSameReadFailureKeepsItsFirstTime(t *testing.T) {
	a, _ := appOnFile(t, linuxPool)
	clk := a.opts.Clock.(*clock.Virtual)
	if err := os.Remove(a.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	first := clk.Now()
	for range 3 {
		_ = a.reloadConfig(t.Context()) // whether a failed read fails the step is another test's
		clk.Advance(30 * time.Second)
	}
	ref := a.configs.Status().Refused
	if ref == nil || !ref.At.Equal(first) || !ref.Unreadable() {
		t.Fatalf("after three failed reads the dashboard shows %+v, want the read failure since %v", ref, first)
	}
	src := &stubSource{}
	src.answer("", errors.New("GET contents: 502 Bad Gateway"))
	a.source = src
	other := clk.Now()
	_ = a.reloadConfig(t.Context())
	if ref := a.configs.Status().Refused; ref == nil || !ref.At.Equal(other) {
		t.Errorf("another failure is shown %+v, want it since %v", ref, other)
	}
}

// A newer file that has not settled yet is not read: a file written just
// after the source could not be read leaves the read failure on the
// dashboard and in bullpen_config_unreadable, is not said to be the
// configuration in force read again, and is logged once as waiting. Once
// it settles, it is read and put in force.
func TestANewerFileWaitingToSettleIsNotARead(t *testing.T) {
	a, _, logs := appOnLoggedFile(t, linuxPool)
	step := a.configLoop().Step
	if err := os.Remove(a.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	_ = step(t.Context())
	if err := os.WriteFile(a.opts.ConfigPath, []byte(windowsPool), 0o600); err != nil { // dated now: not settled
		t.Fatal(err)
	}
	for range 2 {
		if err := step(t.Context()); err != nil {
			t.Fatalf("a file waiting to settle failed the step: %v", err)
		}
	}
	if gauge := testutil.ToFloat64(a.configReloads.unreadable); gauge != 1 {
		t.Errorf("bullpen_config_unreadable %v while a newer file settles, want the failed read's 1", gauge)
	}
	if ref := a.configs.Status().Refused; ref == nil || !ref.Unreadable() {
		t.Errorf("the dashboard shows %+v while a newer file settles, want the failed read", ref)
	}
	if lines := logs.Lines("configuration read again is the one in force"); len(lines) != 0 {
		t.Errorf("a file not yet read is said to be the one in force read again: %q", lines)
	}
	if lines := logs.Lines("level=INFO", "a newer file waits to settle"); len(lines) != 1 {
		t.Errorf("%d lines say a newer file waits to settle, over two reads of one version, want 1:\n%s", len(lines), logs.String())
	}
	writeSettled(t, a.opts.ConfigPath, windowsPool)
	_ = step(t.Context())
	if _, ok := a.Config().Pool("windows"); !ok || testutil.ToFloat64(a.configReloads.unreadable) != 0 {
		t.Errorf("the settled file is not in force, or bullpen_config_unreadable is still %v", testutil.ToFloat64(a.configReloads.unreadable))
	}
}
