package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// The test's side of TestServeSurvivesKillNineInABurst: it plays GitHub,
// sending workflow_job deliveries, redelivering those serve did not accept,
// and reporting runners' starts and ends as they happen on the machines.

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
	action   string
	job      int64
	body     []byte
	accepted bool
	refused  bool // once not answered 202: GitHub redelivers it
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
			out = append(out, b.hook(testfixtures.Job{ID: id, RunID: id + 1_000_000, Labels: b.labels[id]}))
		}
	}
	return out
}

// hook makes and keeps the delivery of j; its id is new, as GitHub's are
// for each event (a redelivery keeps it).
func (b *burstStack) hook(j testfixtures.Job) *hook {
	h := &hook{id: fmt.Sprintf("d-%d", len(b.hooks)), action: j.Action, job: j.ID, body: testfixtures.Payload(j)}
	if h.action == "" {
		h.action = "queued"
	}
	b.hooks = append(b.hooks, h)
	return h
}

// post delivers h once; it says whether serve answered 202. Any other
// answer is a mistake in the test's own deliveries.
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

// sendKilling delivers hooks all at once and kills serve as soon as
// killAfter of them are accepted: some are stored and not yet taken in,
// some in flight, the rest refused.
func (b *burstStack) sendKilling(hooks []*hook, killAfter int32, at string) {
	b.t.Helper()
	var accepted atomic.Int32
	enough, finished := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, h := range hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.post(h) && accepted.Add(1) == killAfter {
				once.Do(func() { close(enough) })
			}
		}()
	}
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
// not accept is redelivered once it is up.
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
	err := errors.New("want: start|end NANOSECONDS JITCONFIG")
	if len(f) == 3 {
		ns, err = strconv.ParseInt(f[1], 10, 64)
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

// report delivers GitHub's event for a runner's start or end.
func (b *burstStack) report(run *runnerRun, started bool) {
	j := testfixtures.Job{ID: run.job, RunID: run.job + 1_000_000, Labels: b.labels[run.job],
		RunnerName: domain.RunnerName(run.instance, run.job), Started: run.start}
	if started {
		j.Action = "in_progress"
	} else {
		j.Action, j.Conclusion, j.Completed = "completed", "success", run.end
	}
	b.post(b.hook(j))
}

// running is the number of runners started and not ended.
func (b *burstStack) running() int {
	b.observe()
	return len(b.runs) - b.endedNow()
}

func (b *burstStack) ended() int {
	b.observe()
	return b.endedNow()
}

// endedNow counts the runners known to have ended, without reading the log.
func (b *burstStack) endedNow() int {
	n := 0
	for _, run := range b.runs {
		if !run.end.IsZero() {
			n++
		}
	}
	return n
}
