package app

import (
	"errors"
	"os"
	"testing"
	"time"

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
