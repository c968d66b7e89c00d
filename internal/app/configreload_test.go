package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

const (
	linuxPool   = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  linux:\n    runner: small\n"
	windowsPool = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  windows:\n    runner: small\n"
	// unknownRunner does not validate: line 5 names a runner that is not
	// defined.
	unknownRunner = "runners:\n  small: {image: ubuntu-24.04}\npools:\n  linux:\n    runner: large\n"
)

// stubSource answers reads with what the test sets.
type stubSource struct {
	mu    sync.Mutex
	data  []byte
	err   error
	reads int
}

func (s *stubSource) Name() string { return "github://acme/.github-private/.github/runs-on.yml" }

func (s *stubSource) Read(context.Context) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.err != nil {
		return nil, false, s.err
	}
	return s.data, true, nil
}

func (s *stubSource) answer(data string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.err = []byte(data), err
}

func (s *stubSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func unreadableReads(a *App) float64 {
	return testutil.ToFloat64(a.configReloads.reads.WithLabelValues(reloadUnreadable))
}

// A source that does not answer for a while (GitHub's contents API
// failing for a few seconds) leaves the configuration in force as it is:
// every replica reads the same source, so failing the loop step would
// mark all of them unhealthy at once and take them out of a load
// balancer's rotation. The failure is counted, shown on the dashboard and
// logged instead.
func TestAnUnreadableConfigurationDoesNotFailTheLoop(t *testing.T) {
	a, _, logs := appOnLoggedFile(t, linuxPool)
	if err := os.Remove(a.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	step := a.configLoop().Step
	for i := range 3 {
		if err := step(t.Context()); err != nil {
			t.Fatalf("read %d of a missing file failed the loop step: %v", i+1, err)
		}
	}
	if _, ok := a.Config().Pool("linux"); !ok {
		t.Fatal("the configuration in force was dropped")
	}
	if got := unreadableReads(a); got != 3 {
		t.Errorf("%v unreadable reads counted, want 3", got)
	}
	ref := a.configs.Status().Refused
	if ref == nil || len(ref.Problems) != 1 || !strings.Contains(ref.Problems[0].Msg, "no such file") {
		t.Errorf("the dashboard shows %+v, want the read error", ref)
	}
	if got := logs.Lines("level=WARN", "configuration unreadable", "no such file"); len(got) != 3 {
		t.Errorf("%d WARN lines for the failed reads, want 3:\n%s", len(got), logs.String())
	}
}

// Whether the source is unreadable now is a gauge, which an alert can
// hold for a time: the counter of failed reads says as much for failures
// spread between good reads as for a source down for good, and too little
// for a source read once every ten minutes.
func TestTheGaugeSaysWhetherTheNewestReadFailed(t *testing.T) {
	a, write := appOnFile(t, linuxPool)
	step := a.configLoop().Step
	gauge := func() float64 { return testutil.ToFloat64(a.configReloads.unreadable) }
	if got := gauge(); got != 0 {
		t.Fatalf("bullpen_config_unreadable is %v at start, want 0", got)
	}
	if err := os.Remove(a.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	_ = step(t.Context())
	if got := gauge(); got != 1 {
		t.Fatalf("bullpen_config_unreadable is %v after a failed read, want 1", got)
	}
	// The same file comes back: nothing is loaded, but the source answers.
	write(linuxPool)
	if err := step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := gauge(); got != 0 {
		t.Fatalf("bullpen_config_unreadable is %v once the source is read again, want 0", got)
	}
}

// A read GitHub refuses for its rate limit is not tried again before the
// time GitHub gave: reading sooner is refused again and spends what is
// left of the budget. The waiting reads still count as unreadable, so that
// the alert on them holds for as long as the source is not read.
func TestAReadRefusedForGitHubsRateLimitWaitsForIt(t *testing.T) {
	a, _, logs := appOnLoggedFile(t, linuxPool)
	clk := a.opts.Clock.(*clock.Virtual)
	until := clk.Now().Add(10 * time.Minute)
	src := &stubSource{}
	src.answer("", &configsource.RateLimitError{Name: src.Name(), Status: 403, Until: until})
	a.source = src
	step := a.configLoop().Step
	for _, wait := range []time.Duration{0, time.Minute, 8*time.Minute + 59*time.Second} {
		clk.Advance(wait)
		_ = step(t.Context()) // whether a failed read fails the step is another test's
	}
	if n := src.count(); n != 1 {
		t.Fatalf("%d reads before %s, want the one refused", n, until.Format(time.RFC3339))
	}
	if got := unreadableReads(a); got != 3 {
		t.Errorf("%v unreadable reads counted, want 3", got)
	}
	if got := logs.Lines("level=WARN", "configuration unreadable", "until="+until.Format(time.RFC3339)); len(got) != 1 {
		t.Errorf("%d WARN lines saying until when reads wait, want 1:\n%s", len(got), logs.String())
	}
	src.answer(linuxPool, nil)
	clk.Advance(time.Second)
	if err := step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := src.count(); n != 2 {
		t.Fatalf("%d reads once the rate limit ended, want 2", n)
	}
	if ref := a.configs.Status().Refused; ref != nil {
		t.Errorf("the dashboard still shows %+v once the file in force was read again", ref)
	}
}

// A refusal shown on the dashboard is taken back when the file read is
// the one in force again, however it came back: a source reports changes
// since its last successful read, not since what is in force.
func TestARefusalIsForgottenWhenTheFileInForceIsBack(t *testing.T) {
	a, write := appOnFile(t, linuxPool)
	for _, away := range []struct {
		name  string
		leave func()
	}{
		{"removed", func() {
			if err := os.Remove(a.opts.ConfigPath); err != nil {
				t.Fatal(err)
			}
		}},
		{"invalid", func() { write(unknownRunner) }},
	} {
		away.leave()
		_ = a.reloadConfig(t.Context()) // whether a failed read fails the step is another test's
		if a.configs.Status().Refused == nil {
			t.Fatalf("%s: the dashboard shows no refusal", away.name)
		}
		write(linuxPool)
		if err := a.reloadConfig(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ref := a.configs.Status().Refused; ref != nil {
			t.Errorf("%s, then the file in force written back: the dashboard still shows %+v", away.name, ref.Problems)
		}
		if got := testutil.ToFloat64(a.configReloads.refused); got != 0 {
			t.Errorf("%s, then the file in force written back: bullpen_config_refused %v, want 0", away.name, got)
		}
	}
}

// The line-numbered problems of an invalid file come back after a read
// that failed, when the same invalid file is read again.
func TestAnInvalidFilesProblemsComeBackAfterAFailedRead(t *testing.T) {
	a, write := appOnFile(t, linuxPool)
	write(unknownRunner)
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := a.configs.Status().Refused
	if want == nil || len(want.Problems) == 0 || want.Problems[0].Line != 5 {
		t.Fatalf("the invalid file's refusal is %+v, want a problem on line 5", want)
	}
	if err := os.Remove(a.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	_ = a.reloadConfig(t.Context()) // whether a failed read fails the step is another test's
	write(unknownRunner)
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := a.configs.Status().Refused
	if got == nil || !slices.Equal(got.Problems, want.Problems) || string(got.Source) != unknownRunner {
		t.Fatalf("after a failed read and the same invalid file: %+v, want %+v", got, want)
	}
	if n := testutil.ToFloat64(a.configReloads.reads.WithLabelValues(reloadRefused)); n != 1 {
		t.Errorf("the same invalid file refused %v times, want once", n)
	}
}

// A file that changed between the parse of the configuration given and
// the app's first read of the source is put in force: the first read is
// what later reads compare with, so it must be what is in force.
func TestAFileChangedBeforeTheFirstReadIsPutInForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs-on.yml")
	given, err := config.Parse(path, []byte(linuxPool))
	if err != nil {
		t.Fatal(err)
	}
	writeSettled(t, path, windowsPool)
	a, err := New(context.Background(), Options{Config: given, ConfigPath: path, StorePath: sqlitetest.Path(t), WebhookSecret: "secret", AdminToken: "token",
		Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Config().Pool("windows"); !ok {
		t.Fatal("the file as read by the app is not in force")
	}
	if got := string(a.configs.Status().Source); got != windowsPool {
		t.Fatalf("the dashboard shows %q in force, want the file read", got)
	}
}

// What the parser ignores or suspects (RunsOn-only runner keys) is logged
// with its position, once each time a configuration is put in force: at
// start and at a reload, not at every read of the same file.
func TestConfigurationWarningsAreLoggedWhenPutInForce(t *testing.T) {
	const warned = "runners:\n  small:\n    image: ubuntu-24.04\n    private: true\npools:\n  linux:\n    runner: small\n"
	a, write, logs := appOnLoggedFile(t, warned)
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.Run(stopped); err != nil {
		t.Fatal(err)
	}
	private := func() int {
		return len(logs.Lines("level=WARN", "configuration warning", "line=4", "col=5", `\"private\"`))
	}
	if n := private(); n != 1 {
		t.Fatalf("%d WARN lines for line 4 at start, want 1:\n%s", n, logs.String())
	}
	write(strings.Replace(warned, "private: true", "private: true\n    tags: [a]", 1))
	for range 2 {
		if err := a.reloadConfig(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := private(); n != 2 {
		t.Errorf("%d WARN lines for line 4 after a reload, want 2:\n%s", n, logs.String())
	}
	if n := len(logs.Lines("level=WARN", "configuration warning", "line=5", `\"tags\"`)); n != 1 {
		t.Errorf("%d WARN lines for line 5 after a reload, want 1:\n%s", n, logs.String())
	}
}

// A reload is refused, as serve's start is, when a pool's autoscaling could
// not reach its threshold at the converger's cycle: in force it would never
// scale, and the next restart would stop on it.
func TestAReloadWhoseAutoscalingTheConvergerCannotPollIsRefused(t *testing.T) {
	a, write := appOnFile(t, linuxPool)
	write(linuxPool + "    autoscale: {poll-interval: 100s}\n")
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	ref := a.configs.Status().Refused
	if ref == nil || len(ref.Problems) == 0 || !strings.Contains(ref.Problems[0].Msg, "linux") {
		t.Fatalf("the dashboard shows %+v, want the pool's autoscaling refused", ref)
	}
	if p := ref.Problems[0]; p.Line != 6 || p.Col != 5 {
		t.Errorf("the refusal is placed at %d:%d, want 6:5, the pool's autoscale block", p.Line, p.Col)
	}
	if _, ok := a.Config().Pool("linux"); !ok || a.Config().Pools[0].Autoscale != nil {
		t.Errorf("the refused file was put in force: %+v", a.Config().Pools)
	}
}
