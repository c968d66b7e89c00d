package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// burstConfig has a pool that serves one job per machine, a pool whose
// machines go back to the resource pool after a job (so one machine serves
// several jobs, one after the other), and the runner that ad-hoc runner=
// jobs are created from.
const burstConfig = `runners:
  small:
    image: ubuntu24-full-x64
pools:
  warm:
    runner: small
    schedule:
      - name: default
        hot: 2
  reuse:
    runner: small
    reuse: true
    max-jobs-per-instance: 5
    schedule:
      - name: default
        hot: 2
`

// burstStack is serve --cloud local killed and restarted on one store and
// one machine directory (a crashStack), with the test playing GitHub: it
// sends jobs, tells serve when each runner starts and ends, and redelivers
// what serve did not accept.
type burstStack struct {
	*crashStack
	client     *http.Client
	up         bool
	hooks      []*hook
	labels     map[int64][]string // every job sent
	runs       []*runnerRun
	lines      int // runner log lines read
	nextJob    int64
	recovered  []string
	duplicates int
	lostHellos int
	short      []string // what the last look found wanting
}

func newBurstStack(t *testing.T) *burstStack {
	dir := t.TempDir()
	b := &burstStack{crashStack: &crashStack{t: t, store: filepath.Join(dir, "bullpen.db"),
		machines: filepath.Join(dir, "machines"), runner: filepath.Join(dir, "runner.sh"), port: freePort(t)},
		client: &http.Client{Timeout: 15 * time.Second}, labels: map[int64][]string{}, nextJob: 8_000_001}
	if err := os.WriteFile(b.runner, []byte(timedRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after serve's own cleanup: whatever a
	// failed run left of the machines is killed.
	t.Cleanup(func() {
		for _, pid := range agentPIDs(t, b.machines) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return b
}

func (b *burstStack) start() time.Time {
	b.t.Helper()
	b.starts++
	if b.s != nil {
		b.noteLostHellos()
		b.s.eventually("the killed serve's port free again", 30*time.Second, b.portFree)
	}
	b.s = startServerWith(b.t, burstConfig, "--store", "sqlite://"+b.store, "--listen", "127.0.0.1:"+b.port,
		"--cloud", "local", "--local-dir", b.machines,
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s", "--redelivery-after", "3s",
		"--silent-after", "20s", "--orphan-grace", "5s", "--gone-grace", "5s",
		// A claim, a create or a boot that a crash cut short holds its
		// row, and a claimed or booting machine, until its state's
		// deadline: 5 or 10 minutes by default.
		"--deadline", "claimed=20s", "--deadline", "pending=20s", "--deadline", "booting=20s",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND="+b.runner+" {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms",
		"--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s",
		// A machine made for a job boots for 2 s with it: long enough that
		// the kill (b) finds one even when this test is slow to look, as
		// on a loaded machine, where the burst was otherwise all served
		// between two looks.
		"--local-agent-env", "BULLPEN_AGENT_WARMUP_COMMAND=sleep 2")
	b.up = true
	return time.Now()
}

// portFree says whether serve could listen on its port. A killed serve's
// port can stay taken a moment after it died: by its connections that the
// machines' agents have not closed their ends of yet, or by an agent's
// reconnection that was given it as its own port.
func (b *burstStack) portFree() bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+b.port)
	if err != nil {
		return false
	}
	return l.Close() == nil
}

// noteLostHellos counts, in the log of the serve that ran last, machines
// refused a token because a serve killed meanwhile had issued one: they
// never serve, and their rows wait for the booting deadline.
func (b *burstStack) noteLostHellos() {
	b.lostHellos += strings.Count(b.s.logs.String(), "agent hello refused: token already issued")
}

// restart starts serve again, redelivers what it refused, and waits until
// every job it accepted is taken up again (none left queued).
func (b *burstStack) restart(what string) {
	b.t.Helper()
	at := b.start()
	b.redeliver()
	b.s.eventually("work taken up again after "+what, 90*time.Second, func() bool {
		return b.takenUp(func(j api.JobView) bool { return j.Status != string(domain.JobQueued) })
	})
	b.recovered = append(b.recovered, fmt.Sprintf("%s: none queued after %s", what, time.Since(at).Round(time.Millisecond)))
}

// killNine kills serve, the process alone, and logs what it held.
func (b *burstStack) killNine(at string) {
	b.t.Helper()
	b.kill(at)
	b.up = false
	b.snapshot(at)
}

// TestServeSurvivesKillNineInABurst plays GitHub to serve on the local
// cloud through a burst of 60 jobs — pool jobs, jobs on machines that serve
// one after another, ad-hoc runner= jobs on machines made for them — and
// kills serve with SIGKILL three times: with deliveries accepted and not
// taken in, with machines being created and claimed, with jobs running.
// Machines live on. Deliveries refused while serve is down are redelivered.
// Judged by the runners' own log, every job ran once and to its end, none
// is left waiting, no machine ran two jobs at once, and the machines
// running are exactly the instances the store holds live.
func TestServeSurvivesKillNineInABurst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve four times")
	}
	begin := time.Now()
	b := newBurstStack(t)
	defer b.explain()
	b.start()
	b.s.eventually("the pools are ready", 60*time.Second, func() bool { return b.readyHot("warm") == 2 && b.readyHot("reuse") == 2 })

	first := b.queue(8, 8, 8)
	b.sendKilling(first, 4, "(a) right after deliveries were accepted")
	b.restart("restart (a)")
	b.sendAgain(first)

	b.send(b.queue(4, 4, 4))
	b.s.eventually("machines being created or claimed for jobs", 60*time.Second, b.launching)
	b.killNine("(b) while machines were being created and claimed")
	b.send(b.queue(4, 4, 4)) // refused: serve is down
	b.restart("restart (b)")

	// Jobs of their own for the kill while jobs run: the restart may have
	// drained every job before it (a job whose create the kill cut short
	// waits until that launch's pending deadline, and the others run
	// meanwhile), leaving nothing running to kill under.
	b.send(b.queue(4, 4, 4))
	b.s.eventually("jobs running", 60*time.Second, func() bool { return b.running() >= 4 })
	b.killNine("(c) while jobs were running")
	ended := b.ended()
	b.s.eventually("a runner ends while serve is down", 30*time.Second, func() bool { return b.ended() > ended })
	at := b.start()
	b.redeliver()
	b.s.eventually("every job done", 90*time.Second, b.done)
	b.recovered = append(b.recovered, fmt.Sprintf("restart (c): every job done after %s", time.Since(at).Round(time.Millisecond)))

	b.checkServedOnce()
	b.s.eventually("no instance held for a job, every machine running live in the store and no other", 60*time.Second, func() bool {
		return b.settled() && b.machinesMatchInstances()
	})
	b.recovered = append(b.recovered, fmt.Sprintf("every instance idle or gone after %s", time.Since(at).Round(time.Millisecond)))
	strays := b.strays()
	b.logFigures(begin, strays)
	kept := b.agents()
	if err := b.s.stop(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v", err)
	}
	// A stop leaves the machines running for the next serve on the
	// directory (one terminated meanwhile takes its directory along), and
	// starts none.
	after := b.agents()
	for id, pid := range after {
		if kept[id] != pid {
			t.Errorf("machine %s (pid %d) started as serve stopped", id, pid)
		}
	}
	for id, pid := range kept {
		if _, err := os.Stat(filepath.Join(b.machines, id)); err == nil && after[id] != pid {
			t.Errorf("machine %s (pid %d) ended with serve, which leaves its machines to the next serve", id, pid)
		}
	}
}

// agents returns the machines' agent processes by machine id (the
// directory of the settings file their command line names).
func (b *burstStack) agents() map[string]int {
	out := map[string]int{}
	for _, pid := range agentPIDs(b.t, b.machines) {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone meanwhile
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			// serve's own --local-dir names the directory itself (".").
			if rel, err := filepath.Rel(b.machines, arg); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
				out[strings.Split(rel, string(filepath.Separator))[0]] = pid
			}
		}
	}
	return out
}

// strays are agent processes whose machine the local cloud no longer has
// a directory for: it lost track of them. A crash between spawning a
// machine and recording its pid leaves a record without one; a restarted
// serve adopts that machine as stopped, the reaper terminates it as an
// orphan by removing its directory, and its process runs on. They are
// counted, not failed on, until the local cloud adopts such a machine by
// its process; newBurstStack's cleanup kills them.
func (b *burstStack) strays() map[string]int {
	out := map[string]int{}
	for id, pid := range b.agents() {
		if _, err := os.Stat(filepath.Join(b.machines, id)); os.IsNotExist(err) {
			out[id] = pid
		}
	}
	return out
}

// launching: a machine is being created for a job, or one is claimed.
func (b *burstStack) launching() bool {
	b.observe()
	for _, in := range b.s.instances() {
		switch domain.State(in.State) {
		case domain.StatePending, domain.StateBooting:
			if in.Job != "" {
				return true
			}
		case domain.StateClaimed:
			return true
		}
	}
	return false
}

// takenUp: every job serve accepted is recorded and satisfies cond. What
// fell short is kept for the failure message.
func (b *burstStack) takenUp(cond func(api.JobView) bool) bool {
	b.observe()
	recorded := map[int64]bool{}
	var short []string
	for _, j := range b.s.jobs() {
		recorded[j.ID] = true
		if !cond(j) {
			short = append(short, fmt.Sprintf("job %d %s on %q", j.ID, j.Status, j.InstanceID))
		}
	}
	for _, h := range b.hooks {
		if h.action == "queued" && h.accepted && !recorded[h.job] {
			short = append(short, fmt.Sprintf("job %d accepted, not recorded", h.job))
		}
	}
	b.short = short
	return len(short) == 0
}

// done: every job completed, every runner ended, every delivery accepted.
func (b *burstStack) done() bool {
	if !b.takenUp(func(j api.JobView) bool { return j.Status == string(domain.JobCompleted) }) || b.running() > 0 {
		return false
	}
	for _, h := range b.hooks {
		if !h.accepted {
			return false
		}
	}
	return true
}

// settled: every instance is idle (ready, stopped) or terminated, bound to
// no job: none is held by a claim, a create or a boot a crash cut short.
func (b *burstStack) settled() bool {
	var held []string
	for _, in := range b.s.instances() {
		switch domain.State(in.State) {
		case domain.StateTerminated:
		case domain.StateReady, domain.StateStopped:
			if in.Job == "" {
				continue
			}
			fallthrough
		default:
			held = append(held, fmt.Sprintf("instance %s (%s) %s for job %q: %s", in.ID, in.CloudID, in.State, in.Job, in.Reason))
		}
	}
	b.short = held
	return len(held) == 0
}

// checkServedOnce judges by the runners' log: each job's runner started
// once, on the instance serve records for it, and ended; no instance ran
// two jobs at once.
func (b *burstStack) checkServedOnce() {
	b.t.Helper()
	runs := map[int64][]*runnerRun{}
	for _, run := range b.runs {
		runs[run.job] = append(runs[run.job], run)
	}
	jobs := b.s.jobs()
	if len(jobs) != len(b.labels) {
		b.t.Errorf("%d jobs recorded, want %d", len(jobs), len(b.labels))
	}
	for _, j := range jobs {
		if b.labels[j.ID] == nil {
			b.t.Errorf("job %d recorded, never sent", j.ID)
		}
		if on := runs[j.ID]; len(on) != 1 || on[0].instance != j.InstanceID {
			b.t.Errorf("job %d (%s, via %q): %d runner starts, want one on %s", j.ID, j.Status, j.Via, len(on), j.InstanceID)
		}
		if j.Status != string(domain.JobCompleted) || (j.Conclusion != "success" && j.Conclusion != "exit status 0") {
			b.t.Errorf("job %d ended %s %q", j.ID, j.Status, j.Conclusion)
		}
	}
	byInstance := map[string][]*runnerRun{}
	for _, run := range b.runs {
		if run.end.IsZero() {
			b.t.Errorf("the runner of job %d on %s never ended: its machine went under it", run.job, run.instance)
			continue
		}
		byInstance[run.instance] = append(byInstance[run.instance], run)
	}
	for id, list := range byInstance {
		sort.Slice(list, func(i, j int) bool { return list[i].start.Before(list[j].start) })
		for i := 1; i < len(list); i++ {
			if list[i].start.Before(list[i-1].end) {
				b.t.Errorf("instance %s ran jobs %d and %d at once", id, list[i-1].job, list[i].job)
			}
		}
	}
}

// snapshot logs what a killed serve left in its store: deliveries not
// taken in, jobs waiting for an instance, instances by state.
func (b *burstStack) snapshot(at string) {
	b.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.store, clock.Real{})
	if err != nil {
		b.t.Fatal(err)
	}
	defer st.Close()
	q := st.Queue(sqlite.QueueOptions{})
	var queues []string
	for _, name := range []string{domain.QueueInbox, domain.QueuePool, domain.QueueLaunch} {
		s, err := q.Stats(ctx, name)
		if err != nil {
			b.t.Fatal(err)
		}
		queues = append(queues, fmt.Sprintf("%s %d waiting + %d taken", name, s.Visible+s.Delayed, s.InFlight))
	}
	jobs, err := st.ListJobs(ctx, domain.JobFilter{})
	if err != nil {
		b.t.Fatal(err)
	}
	insts, err := st.ListInstances(ctx, domain.InstanceFilter{})
	if err != nil {
		b.t.Fatal(err)
	}
	byStatus, byState := map[domain.JobStatus]int{}, map[domain.State]int{}
	for _, j := range jobs {
		byStatus[j.Status]++
	}
	for _, in := range insts {
		byState[in.State]++
	}
	b.t.Logf("kill -9 %s: %d runners running; %s; jobs %v; instances %v",
		at, b.running(), strings.Join(queues, ", "), byStatus, byState)
}

// explain says, when the test failed, what the last look at serve found
// wanting (the failure itself comes with serve's log).
func (b *burstStack) explain() {
	if !b.t.Failed() {
		return
	}
	var refused []string
	for _, h := range b.hooks {
		if !h.accepted {
			refused = append(refused, fmt.Sprintf("%s %d", h.action, h.job))
		}
	}
	var unfinished []string
	for _, run := range b.runs {
		if run.end.IsZero() {
			unfinished = append(unfinished, fmt.Sprintf("job %d on %s since %s", run.job, run.instance, run.start.Format(time.TimeOnly)))
		}
	}
	b.t.Logf("at the last look: short of the mark %v; deliveries not accepted %v; runners not ended %v",
		b.short, refused, unfinished)
}

func (b *burstStack) logFigures(begin time.Time, strays map[string]int) {
	refused := 0
	for _, h := range b.hooks {
		if h.refused {
			refused++
		}
	}
	via := map[string]int{}
	for _, j := range b.s.jobs() {
		via[j.Via]++
	}
	b.instanceFigures() // logs the instances that served no job, and why
	byServed, created, several := map[int]int{}, 0, 0
	for _, in := range b.s.instances() {
		byServed[in.JobsServed]++
		created++
		if in.JobsServed > 1 {
			several++
		}
	}
	b.noteLostHellos()
	b.t.Logf("%d jobs accepted; %d deliveries (queued, in_progress, completed): %d refused or cut by a crash and redelivered, %d accepted ones sent again",
		len(b.labels), len(b.hooks), refused, b.duplicates)
	b.t.Logf("recovery: %s", strings.Join(b.recovered, "; "))
	b.t.Logf("jobs served via %v; %d instances created, %d of them ran several jobs (instances by jobs served %v); %d starts of serve; %s in all",
		via, created, several, byServed, b.starts, time.Since(begin).Round(time.Millisecond))
	b.t.Logf("machines refused a token a killed serve had issued: %d; agent processes the local cloud lost track of: %d %v",
		b.lostHellos, len(strays), strays)
}
