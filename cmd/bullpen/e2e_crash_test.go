package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// burstConfig has a pool that serves one job per machine, a pool whose
// machines go back to the resource pool after a job (so one machine serves
// several jobs, one after the other), and the runner ad-hoc runner= jobs
// start from.
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

// timedRunner stands in for GitHub's runner and keeps the record the test
// judges by, apart from the control plane's: when it started and ended, with
// its just-in-time config (which names its instance and job). A machine
// terminated under its job leaves a start without an end.
const timedRunner = `#!/bin/sh
log="$(dirname "$0")/runner.log"
echo "start $(date +%s%N) $1" >> "$log"
echo "Running job: $1"
sleep 3
echo "end $(date +%s%N) $1" >> "$log"
`

// runnerRun is one start of a runner, as its log tells it.
type runnerRun struct {
	instance   string
	job        int64
	start, end time.Time // end is zero while it runs
}

// hook is one webhook delivery, kept until serve answers it 202.
type hook struct {
	id       string
	body     []byte
	accepted bool
	refused  bool // once not answered 202: GitHub redelivers it
}

// burstStack is serve --cloud local killed and restarted on one store and
// one machine directory (a crashStack), with the test playing GitHub: it
// sends jobs, tells serve when each runner starts and ends, and redelivers
// what serve did not accept.
type burstStack struct {
	*crashStack
	client     *http.Client
	up         bool
	hooks      []*hook
	labels     map[int64][]string
	runs       []*runnerRun
	lines      int // runner log lines read
	nextJob    int64
	recovered  []string
	duplicates int
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
	b.s = startServerWith(b.t, burstConfig, "--store", "sqlite://"+b.store, "--listen", "127.0.0.1:"+b.port,
		"--cloud", "local", "--local-dir", b.machines, "--environment", "burst",
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s", "--redelivery-after", "3s",
		"--silent-after", "20s", "--orphan-grace", "5s", "--gone-grace", "5s",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND="+b.runner+" {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms",
		"--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s")
	b.up = true
	return time.Now()
}

// restart starts serve again, redelivers what it refused, and waits until
// every job it accepted is taken up again (none left queued).
func (b *burstStack) restart(what string) {
	b.t.Helper()
	at := b.start()
	b.redeliver()
	b.s.eventually("work taken up again after "+what, 90*time.Second, func() bool {
		return b.takenUp(func(j crashJob) bool { return j.Status != string(domain.JobQueued) })
	})
	b.recovered = append(b.recovered, fmt.Sprintf("%s %s", what, time.Since(at).Round(time.Millisecond)))
}

// killNine kills serve, the process alone, and logs what it held.
func (b *burstStack) killNine(at string) {
	b.t.Helper()
	b.kill(at)
	b.up = false
	b.snapshot(at)
}

// queue makes the queued deliveries of n jobs of each kind, interleaved.
func (b *burstStack) queue(warm, reuse, adhoc int) []*hook {
	var out []*hook
	for i := 0; i < max(warm, reuse, adhoc); i++ {
		for _, k := range []struct {
			n     int
			label string
		}{{warm, "runs-on=%d/pool=warm"}, {reuse, "runs-on=%d/pool=reuse"}, {adhoc, "runs-on=%d/runner=small"}} {
			if i >= k.n {
				continue
			}
			id := b.nextJob
			b.nextJob++
			b.labels[id] = []string{fmt.Sprintf(k.label, id+1_000_000)}
			body := testfixtures.Payload(testfixtures.Job{ID: id, RunID: id + 1_000_000, Labels: b.labels[id]})
			out = append(out, b.hook(fmt.Sprintf("queued-%d", id), body))
		}
	}
	return out
}

func (b *burstStack) hook(id string, body []byte) *hook {
	h := &hook{id: id, body: body}
	b.hooks = append(b.hooks, h)
	return h
}

// post delivers h once; it says whether serve answered 202. Any other
// answer from a serve that is up is a failure of the test's own deliveries.
func (b *burstStack) post(h *hook) bool {
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+b.port+"/webhook", bytes.NewReader(h.body))
	if err != nil {
		b.t.Errorf("delivery %s: %v", h.id, err)
		return false
	}
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", h.id)
	req.Header.Set("X-Hub-Signature-256", testfixtures.GoSign(b.s.secret, h.body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusAccepted {
			h.accepted = true
			return true
		}
		b.t.Errorf("delivery %s: %d %s", h.id, resp.StatusCode, msg)
	}
	h.refused = true
	return false
}

// sendKilling delivers hooks from several senders at once and kills serve
// as soon as killAfter of them are accepted: some are stored and not yet
// taken in, some in flight, the rest refused.
func (b *burstStack) sendKilling(hooks []*hook, killAfter int, at string) {
	b.t.Helper()
	work := make(chan *hook, len(hooks))
	for _, h := range hooks {
		work <- h
	}
	close(work)
	var accepted atomic.Int32
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range len(hooks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range work {
				if b.post(h) && int(accepted.Add(1)) == killAfter {
					once.Do(func() { close(enough) })
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-enough:
		b.killNine(at)
		<-finished
	case <-finished:
		b.t.Fatalf("fewer than %d of %d deliveries accepted\n%s", killAfter, len(hooks), b.s.logs.String())
	}
}

// send delivers hooks one after the other, as far as serve takes them.
func (b *burstStack) send(hooks []*hook) {
	for _, h := range hooks {
		b.post(h)
	}
}

// redeliver sends again every delivery serve has not accepted yet.
func (b *burstStack) redeliver() {
	for _, h := range b.hooks {
		if !h.accepted {
			b.post(h)
		}
	}
}

// sendAgain redelivers hooks serve already accepted, as GitHub may when
// it saw no answer: serve must take each job once however often it hears
// of it.
func (b *burstStack) sendAgain(hooks []*hook) {
	for _, h := range hooks {
		if h.accepted && b.post(h) {
			b.duplicates++
		}
	}
}

// observe reads the runners' log and reports as GitHub does: in_progress
// when a runner starts its job, completed when it ends. Whatever serve does
// not accept now is redelivered once it is up.
func (b *burstStack) observe() {
	b.t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(b.runner), "runner.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		b.t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for _, line := range lines[b.lines : len(lines)-1] { // the last is empty, or not written in full
		b.lines++
		if run, started := b.record(line); run != nil {
			b.report(run, started)
		}
	}
	if b.up {
		b.redeliver()
	}
}

// record notes one line of the runners' log; it returns the run it is
// about and whether the line is its start.
func (b *burstStack) record(line string) (*runnerRun, bool) {
	b.t.Helper()
	f := strings.Fields(line)
	var ns int64
	var name string
	var err error
	if len(f) == 3 {
		ns, err = strconv.ParseInt(f[1], 10, 64)
	} else {
		err = errors.New("want 3 fields")
	}
	if err == nil {
		name, err = jitRunnerName(f[2])
	}
	inst, job, ok := domain.ParseRunnerName(name)
	if err != nil || !ok {
		b.t.Errorf("runner log line %q: not a runner's start or end (%v)", line, err)
		return nil, false
	}
	at := time.Unix(0, ns)
	if f[0] == "start" {
		run := &runnerRun{instance: inst, job: job, start: at}
		b.runs = append(b.runs, run)
		return run, true
	}
	for _, run := range b.runs {
		if run.instance == inst && run.job == job && run.end.IsZero() {
			run.end = at
			return run, false
		}
	}
	b.t.Errorf("runner log: %s ended job %d without starting it", inst, job)
	return nil, false
}

// report makes GitHub's delivery for a runner's start or end.
func (b *burstStack) report(run *runnerRun, started bool) {
	j := testfixtures.Job{ID: run.job, RunID: run.job + 1_000_000, Labels: b.labels[run.job],
		RunnerName: domain.RunnerName(run.instance, run.job), Started: run.start}
	if started {
		j.Action = "in_progress"
	} else {
		j.Action, j.Conclusion, j.Completed = "completed", "success", run.end
	}
	b.post(b.hook(fmt.Sprintf("%s-%d-%d", j.Action, run.job, len(b.hooks)), testfixtures.Payload(j)))
}

// takenUp: every job serve accepted is recorded and satisfies cond.
func (b *burstStack) takenUp(cond func(crashJob) bool) bool {
	b.observe()
	want := 0
	for _, h := range b.hooks {
		if h.accepted && strings.HasPrefix(h.id, "queued-") {
			want++
		}
	}
	jobs := b.jobs()
	if len(jobs) < want {
		return false
	}
	for _, j := range jobs {
		if !cond(j) {
			return false
		}
	}
	return true
}

// running is the number of runners started and not ended.
func (b *burstStack) running() int {
	b.observe()
	return len(b.runs) - b.ended()
}

func (b *burstStack) ended() int {
	b.observe()
	n := 0
	for _, run := range b.runs {
		if !run.end.IsZero() {
			n++
		}
	}
	return n
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
	byStatus, byState := map[string]int{}, map[string]int{}
	for _, j := range jobs {
		byStatus[string(j.Status)]++
	}
	for _, in := range insts {
		byState[string(in.State)]++
	}
	b.t.Logf("kill -9 %s: %d runners running; %s; jobs %v; instances %v",
		at, b.running(), strings.Join(queues, ", "), byStatus, byState)
}

// TestServeSurvivesKillNineInABurst plays GitHub to serve on the local
// cloud through a burst of 48 jobs — pool jobs, jobs on machines that
// serve one after another, ad-hoc runner= jobs created for them — and kills
// serve with SIGKILL three times: with deliveries accepted and not taken
// in, with machines being created and claimed, with jobs running. Machines
// live on. Deliveries refused while serve is down are redelivered. Judged
// by the runners' own log, every job ran once and to its end, none is left
// waiting, no machine ran two jobs at once, and every machine left running
// is one the store holds live.
func TestServeSurvivesKillNineInABurst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve four times")
	}
	begin := time.Now()
	b := newBurstStack(t)
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

	b.s.eventually("jobs running", 60*time.Second, func() bool { return b.running() >= 4 })
	b.killNine("(c) while jobs were running")
	ended := b.ended()
	b.s.eventually("a runner ends while serve is down", 30*time.Second, func() bool { return b.ended() > ended })
	at := b.start()
	b.redeliver()
	b.s.eventually("every job done", 90*time.Second, b.done)
	b.recovered = append(b.recovered, fmt.Sprintf("restart (c) to every job done %s", time.Since(at).Round(time.Millisecond)))

	b.checkServedOnce()
	b.s.eventually("every machine running is live in the store, and no other", 60*time.Second, b.machinesMatchInstances)
	b.logFigures(begin)
	if err := b.s.stop(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v", err)
	}
}

// launching: a machine is being created for a job, or one is claimed.
func (b *burstStack) launching() bool {
	b.observe()
	for _, in := range b.instances() {
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

// done: every job completed, every runner ended, every delivery accepted.
func (b *burstStack) done() bool {
	if !b.takenUp(func(j crashJob) bool { return j.Status == string(domain.JobCompleted) }) || b.running() > 0 {
		return false
	}
	for _, h := range b.hooks {
		if !h.accepted {
			return false
		}
	}
	return true
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
	jobs := b.jobs()
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

func (b *burstStack) logFigures(begin time.Time) {
	refused := 0
	for _, h := range b.hooks {
		if h.refused {
			refused++
		}
	}
	via := map[string]int{}
	for _, j := range b.jobs() {
		via[j.Via]++
	}
	b.instanceFigures() // logs the instances that served no job, and why
	served := map[int]int{}
	for _, in := range b.instances() {
		served[in.JobsServed]++
	}
	b.t.Logf("%d jobs accepted; %d deliveries (queued, in_progress, completed), %d of them refused or cut by a crash and redelivered, %d accepted ones sent again",
		len(b.labels), len(b.hooks), refused, b.duplicates)
	b.t.Logf("recovery: %s", strings.Join(b.recovered, "; "))
	b.t.Logf("jobs served via %v; instances by jobs served %v (%d created, %d ran more than one job); %d starts of serve; %s in all",
		via, served, sumValues(served), sumAbove(served, 1), b.starts, time.Since(begin).Round(time.Millisecond))
}

func sumValues(m map[int]int) int { return sumAbove(m, -1) }

func sumAbove(m map[int]int, k int) int {
	n := 0
	for served, count := range m {
		if served > k {
			n += count
		}
	}
	return n
}
