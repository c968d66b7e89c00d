package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
)

// The warm-up is told whether this is the machine's first boot: an agent
// restarted in the boot it first ran in is, a machine started again in a
// later boot (a stopped pool member started for a job) is not, and a
// state directory marked by another machine (baked into an image) does
// not count.
func TestTheWarmUpIsToldTheFirstBoot(t *testing.T) {
	r := newRig(t)
	stub, srv := newStubPlane(t, nil, nil)
	cfg := r.config("bp-1", "secret")
	cfg.WarmUpCommand = "echo \"$" + agent.FirstBootEnv + "\" >> " + agent.ShellQuote(r.path("warm.log"))
	mark := filepath.Join(cfg.StateDir, "first-boot.json")
	warmUp := func(n int) {
		t.Helper()
		_, g := r.startAgainst(cfg, srv)
		stub.await(t, "warm", func() bool { return stub.signals["warm"] == n })
		if err := g.stop(); err != nil {
			t.Fatal(err)
		}
	}

	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mark, []byte(`{"cloud_id":"i-bp-0","boot_id":"the image's"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	warmUp(1)
	want := []string{"1"}
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err == nil {
		warmUp(2) // the agent restarted in the same boot
		want = append(want, "1")
	}
	if err := os.WriteFile(mark, []byte(`{"cloud_id":"i-bp-1","boot_id":"an earlier boot"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	warmUp(len(want) + 1)
	want = append(want, "0")
	if got := r.lines("warm.log"); !slices.Equal(got, want) {
		t.Fatalf("the warm-ups were told %q, want %q", got, want)
	}
}
