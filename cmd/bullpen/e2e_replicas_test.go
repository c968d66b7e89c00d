package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// replicasPools follows smallRunnerOn(image) in the configuration.
const replicasPools = `  warm:
    runner: small
    reuse: true
    schedule:
      - name: default
        hot: %d
`

// replicaSet is two bullpen serve processes sharing a store, queues and
// a cloud on one emulator, behind a load balancer their machines' agents
// use.
type replicaSet struct {
	t        *testing.T
	a, b     *server
	lb       *spread
	runs     runnerLog
	machines *ec2Machines
}

func startReplicas(t *testing.T, hot int, onAWS bool) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, lb: newSpread(t), runs: runnerLog{path: filepath.Join(t.TempDir(), "runs.log")}}
	w := newEC2World(t, "replicas", rs.runs.script(), "v1")
	rs.machines = w.machines
	// A burst brings up a hundred machines or more. Agents long-polling
	// every 2 s, as in the quicker tests, would spend all the emulator's
	// few dozen DynamoDB calls a second, and their job-finished signals
	// would wait past their timeout; production's cadence (a 30 s long
	// poll) leaves the store to the jobs.
	w.machines.useCadence()
	cfg := writeFile(t, w.dir, "runs-on.yml", smallRunnerOn(w.image("replicas", "v1"))+fmt.Sprintf(replicasPools, hot))
	// Every cloud call of both replicas and of the machines goes through
	// one emulator process: a reused instance gets longer than its
	// production 10 s to register. Rows the killed replica left pending
	// (it died between launching machines and recording them) expire
	// after a minute instead of five, and the reaper looks every 15 s,
	// so their jobs are served again within the test.
	common := append(append([]string{"--config", cfg, "--environment", "replicas", "--agent-url", rs.lb.URL, "--lease-period", replicaLease.String(),
		"--claim-registration-timeout", "30s", "--deadline", "pending=1m", "--reap-every", "15s"},
		w.serveFlags()...), sharedState(t, w.bin, w.run, w.endpoint, onAWS)...)
	rs.a = startServerWith(t, "", append(common, "--replica-id", "replica-a")...)
	rs.b = startServerWith(t, "", append(common, "--replica-id", "replica-b")...)
	rs.lb.add(rs.a.base)
	rs.lb.add(rs.b.base)
	return rs
}

// replicaLease is the replicas' lease period: short, for a quick failover,
// but with room for the emulator's answers, which take a second or two
// each in a burst: a replica whose renewal answers after its lease has
// run out stops its step.
const replicaLease = 6 * time.Second

// deliverTo posts a signed delivery to s; false when s cannot be reached or
// refuses it.
func deliverTo(s *server, id string, body []byte) bool {
	req, _ := http.NewRequest(http.MethodPost, s.base+"/webhook", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", testfixtures.GoSign(s.secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusAccepted
}

// TestTwoReplicasServeABurstAndSurviveOneDying runs two replicas sharing
// one SQLite file, with their machines on the EC2 emulator, and sends a
// burst of 300 pool jobs through both replicas' webhooks; one replica is
// killed -9 mid-burst. Every job is served exactly once, no instance runs
// two jobs at a time, one converger acts at a time (the survivor takes the
// lease only once the dead one's has lapsed), and the survivor refills the
// pool.
func TestTwoReplicasServeABurstAndSurviveOneDying(t *testing.T) {
	if testing.Short() {
		t.Skip("a burst through two replicas on the emulator")
	}
	burstThroughReplicas(t, startReplicas(t, 8, false), 8, 300, 8_100_001)
}

// TestTwoReplicasOnDynamoDBAndSQS is the same on a DynamoDB table and SQS
// queues of the emulator, with 150 jobs unless BULLPEN_REPLICAS_AWS_JOBS
// says otherwise. The emulator answers one DynamoDB or SQS call at a time,
// a few dozen a second on two CPUs: 300 jobs took half of this package's
// time in CI, and 150 still bring up machines beyond the pool on both
// sides of the kill.
func TestTwoReplicasOnDynamoDBAndSQS(t *testing.T) {
	if testing.Short() {
		t.Skip("a burst through two replicas on the emulator")
	}
	jobs := 150
	if v := os.Getenv("BULLPEN_REPLICAS_AWS_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 {
			t.Fatalf("BULLPEN_REPLICAS_AWS_JOBS=%q: want a number of jobs, at least 3", v)
		}
		jobs = n
	}
	burstThroughReplicas(t, startReplicas(t, 4, true), 4, jobs, 8_200_001)
}

// burstThroughReplicas sends jobs pool jobs from first through both
// replicas, kills a after a third of them, and checks what the survivor
// made of them.
func burstThroughReplicas(t *testing.T, rs *replicaSet, hot, jobs, first int) {
	t.Helper()
	rs.b.eventually("the pool converges", 120*time.Second, func() bool { return rs.b.poolCounts("warm")["ready_hot"] == hot })

	bodies := queuedFor(t, jobs, first, "runs-on=%d/pool=warm/env=replicas")
	began := time.Now()
	var killedAt time.Time
	var refused atomic.Int64
	for i, body := range bodies {
		id := fmt.Sprintf("replicas-%d", first+i)
		to := rs.a
		if i%2 == 1 || !killedAt.IsZero() {
			to = rs.b
		}
		if !deliverTo(to, id, body) {
			refused.Add(1)
			// GitHub redelivers a refused delivery; the balancer sends it
			// to the survivor, which refuses it too (503) while its inbox
			// takes over 5 s to answer, as the emulator can in a burst.
			rs.b.eventually("the survivor takes delivery "+id, time.Minute, func() bool { return deliverTo(rs.b, id, body) })
		}
		if i == jobs/3 {
			if err := rs.a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-rs.a.done
			killedAt = time.Now()
			rs.lb.remove(rs.a.base)
			t.Logf("kill -9 replica a after %d deliveries", i+1)
		}
	}
	t.Logf("%d deliveries taken in %s", jobs, time.Since(began).Round(time.Second))
	l := &localStack{server: rs.b}
	var statuses map[string]int
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the burst's jobs by status when the test ended: %v", statuses)
		}
	})
	// The emulator answers one DynamoDB or SQS call at a time: a longer
	// burst gets longer.
	window := max(7*time.Minute, time.Duration(jobs)*2*time.Second)
	rs.b.eventually("every job completes", window, func() bool {
		statuses = map[string]int{}
		for _, j := range rs.b.jobs() {
			if j.ID >= int64(first) && j.ID < int64(first+jobs) {
				statuses[j.Status]++
			}
		}
		return statuses["completed"] == jobs
	})
	// At least the target: instances the burst brought back to the pool
	// beyond it stay until their idle lifetime (10 minutes) is over.
	t.Logf("every job completed %s after the first delivery", time.Since(began).Round(time.Second))
	rs.b.eventually("the survivor refills the pool", 120*time.Second, func() bool { return rs.b.poolCounts("warm")["ready_hot"] >= hot })

	rs.checkRuns(l, first, jobs)
	rs.checkOneConverger(killedAt)
	t.Logf("%d deliveries refused (by the dead replica, or a slow inbox) and redelivered", refused.Load())
	if calls := awsCallsPerJob(t, rs.b, jobs); calls != "" {
		t.Logf("the survivor's DynamoDB and SQS calls, from start to the end of the burst, per job:\n%s", calls)
	}
}

// awsCallsPerJob reads a replica's bullpen_aws_calls_total and divides each
// DynamoDB and SQS series by jobs; bullpen_aws_call_seconds gives each
// operation's mean time. The writes refused because a row had changed
// (bullpen_store_refused_writes_total) follow, per job too.
func awsCallsPerJob(t *testing.T, s *server, jobs int) string {
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// series maps "metric{labels}" to its value, for one family's lines.
	series := func(prefix string) map[string]float64 {
		out := map[string]float64{}
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, prefix+"{")
			if !ok || strings.Contains(rest, `service="EC2"`) {
				continue
			}
			labels, value, _ := strings.Cut(rest, "} ")
			out[labels], _ = strconv.ParseFloat(value, 64)
		}
		return out
	}
	calls, spent := series("bullpen_aws_calls_total"), series("bullpen_aws_call_seconds_sum")
	var b strings.Builder
	for _, labels := range slices.Sorted(maps.Keys(calls)) {
		n := calls[labels]
		fmt.Fprintf(&b, "  %-60s %7.0f  %6.2f per job, %6.1f ms each\n", labels, n, n/float64(jobs), 1000*spent[labels]/n)
	}
	refused := series("bullpen_store_refused_writes_total")
	for _, labels := range slices.Sorted(maps.Keys(refused)) {
		fmt.Fprintf(&b, "  refused %-52s %7.0f  %6.2f per job\n", labels, refused[labels], refused[labels]/float64(jobs))
	}
	return b.String()
}

// checkRuns: every job's runner ran once, on the instance bullpen records,
// and no instance ran two jobs at a time.
func (rs *replicaSet) checkRuns(l *localStack, first, jobs int) {
	t := rs.t
	spans := rs.runs.spans(t)
	byJob := map[int64][]*runnerSpan{}
	byInstance := map[string][]*runnerSpan{}
	for _, sp := range spans {
		byJob[sp.job] = append(byJob[sp.job], sp)
		byInstance[sp.instance] = append(byInstance[sp.instance], sp)
	}
	recorded := map[int64]api.JobView{}
	for _, j := range l.jobs() { // once: the list is large
		recorded[j.ID] = j
	}
	for id := int64(first); id < int64(first+jobs); id++ {
		if n := len(byJob[id]); n != 1 {
			t.Errorf("job %d: %d runners ran it, want 1", id, n)
			continue
		}
		if j := recorded[id]; j.InstanceID != byJob[id][0].instance {
			t.Errorf("job %d ran on %s but is recorded on %s", id, byJob[id][0].instance, j.InstanceID)
		}
	}
	for inst, list := range byInstance {
		sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
		for i := 1; i < len(list); i++ {
			if list[i].start < list[i-1].end {
				t.Errorf("instance %s ran jobs %d and %d at once", inst, list[i-1].job, list[i].job)
			}
		}
	}
}

// checkOneConverger: the replicas never held the converger's lease at
// once (a's last spell ends when it died), and the survivor took it over
// within the lease period of the kill.
func (rs *replicaSet) checkOneConverger(killedAt time.Time) {
	t := rs.t
	aSpells, bSpells := leaseSpells(rs.a.logs.String(), "converger"), leaseSpells(rs.b.logs.String(), "converger")
	if len(aSpells)+len(bSpells) == 0 {
		t.Fatal("no replica logged taking the converger's lease")
	}
	for _, a := range aSpells {
		if a.to.IsZero() || a.to.After(killedAt) {
			a.to = killedAt
		}
		for _, b := range bSpells {
			if b.from.Before(a.to) && (b.to.IsZero() || b.to.After(a.from)) {
				t.Errorf("both replicas held the converger's lease at once: a from %s to %s, b from %s", a.from, a.to, b.from)
			}
		}
	}
	// The survivor's first spell that lasts past the kill: a slow store
	// can end spells early (the lease runs out before a renewal answers),
	// and the survivor takes the lease again.
	for _, b := range bSpells {
		if b.to.IsZero() || b.to.After(killedAt) {
			if took := b.from.Sub(killedAt); took > replicaLease+5*time.Second {
				t.Errorf("the survivor took the converger over %s after the kill, want within the lease period (%s)", took, replicaLease)
			}
			return
		}
	}
	t.Error("the survivor never took the converger's lease over")
}
