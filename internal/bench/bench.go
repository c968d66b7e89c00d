// Package bench measures bullpen's job path on the embedded default: a burst
// of pool jobs against a stopped pool, and a burst of cold-start jobs, on
// the simulated cloud with zero latency, next to the raw conditional-update
// rate of the same store measured in the same run, so that throughput reads
// as a ratio of the store's own limit.
package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simagent"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// Options size a run.
type Options struct {
	Jobs    int           // jobs per burst; default 1000
	CASOps  int           // conditional updates timed for the store's rate; default 2000
	Timeout time.Duration // per burst; default 2 min
	Dir     string        // for the store; default a temporary directory
	// Only, when set, runs just the named scenario (pool_burst, cold_burst).
	Only string
	// Shared, when set, runs on DynamoDB and SQS (an emulator, usually)
	// instead of SQLite, and reports their calls per job.
	Shared *app.Shared
}

// Scenario is one burst's figures.
type Scenario struct {
	Jobs              int            `json:"jobs"`
	JobsPerSecond     float64        `json:"jobs_per_second"`
	P50ms             float64        `json:"p50_ms"`
	P99ms             float64        `json:"p99_ms"`
	DoubleAssignments int            `json:"double_assignments"`
	InstancesStarted  int            `json:"instances_started"`
	InstancesDetached int            `json:"instances_detached"`
	InstancesCreated  int            `json:"instances_created"`
	APICalls          map[string]int `json:"api_calls"`
	// OfStoreCAS is JobsPerSecond over the store's raw conditional-update
	// rate measured in the same run.
	OfStoreCAS float64 `json:"throughput_of_store_cas"`
	Seconds    float64 `json:"seconds"`
	// WebhookSeconds is how long posting the burst's webhooks took.
	WebhookSeconds float64 `json:"webhook_seconds"`
	// AWSCallsPerJob are the DynamoDB and SQS calls of the burst, by
	// service and operation, per job: what those services bill by.
	AWSCallsPerJob map[string]float64 `json:"aws_calls_per_job,omitempty"`
	// RefusedWritesPerJob are the DynamoDB writes of one row refused
	// because it had changed (bullpen_store_refused_writes_total), by
	// "row:remembered".
	RefusedWritesPerJob map[string]float64 `json:"refused_writes_per_job,omitempty"`
}

// Result is the whole report.
type Result struct {
	StoreCASPerSecond float64             `json:"store_cas_per_second"`
	Scenarios         map[string]Scenario `json:"scenarios"`
}

const secret = "bench-secret"

// bursts are the scenarios Run measures: the jobs' label (with the run id
// as %d) and the first job id.
var bursts = []struct {
	name  string
	label string
	first int64
}{
	{"pool_burst", "runs-on=%d/pool=bench", 1_000_000},
	{"cold_burst", "runs-on=%d/runner=cold", 2_000_000},
}

// Scenarios are the bursts Run measures, by name.
var Scenarios = func() []string {
	var names []string
	for _, b := range bursts {
		names = append(names, b.name)
	}
	return names
}()

// CheckScenario says why Options.Only cannot be name ("" runs them all).
func CheckScenario(name string) error {
	if name != "" && !slices.Contains(Scenarios, name) {
		return fmt.Errorf("no scenario %q: the scenarios are %s", name, strings.Join(Scenarios, " and "))
	}
	return nil
}

// posters is how many webhook deliveries are in flight at once, as GitHub
// delivers them concurrently.
const posters = 32

// ec2Ops are the operations reported for every scenario, zero or not.
var ec2Ops = []string{sim.OpCreateFleet, sim.OpStartInstances, sim.OpStopInstances, sim.OpTerminateInstances, sim.OpCreateTags, sim.OpDescribeInstances}

// withDefaults fills in what o leaves unset, or says why it cannot run.
func (o Options) withDefaults() (Options, error) {
	if o.Jobs <= 0 {
		o.Jobs = 1000
	}
	if o.Jobs > config.MaxPoolSize {
		return o, fmt.Errorf("at most %d jobs a burst: the pool burst's pool holds as many stopped instances, and no pool holds more", config.MaxPoolSize)
	}
	if err := CheckScenario(o.Only); err != nil {
		return o, err
	}
	if o.CASOps <= 0 {
		o.CASOps = 2000
		if o.Shared != nil {
			o.CASOps = 200 // each is a network round trip, and an emulator's slow
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	return o, nil
}

// Run runs both bursts.
func Run(ctx context.Context, o Options) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "bullpen-bench-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	w, err := newWorld(ctx, o)
	if err != nil {
		return Result{}, err
	}
	defer w.a.Close()

	res := Result{Scenarios: map[string]Scenario{}}
	if res.StoreCASPerSecond, err = MeasureCAS(ctx, w.a.Store, o.CASOps); err != nil {
		return res, fmt.Errorf("measure the store: %w", err)
	}
	if o.Only == "" || o.Only == "pool_burst" {
		if err := w.fillPool(ctx, o.Jobs, o.Timeout); err != nil {
			return res, err
		}
	}
	loops, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.a.RunJobPath(loops) }()
	defer func() { stop(); <-done }()

	for _, sc := range bursts {
		if o.Only != "" && o.Only != sc.name {
			continue
		}
		s, err := w.burst(ctx, sc.label, sc.first, o.Jobs, o.Timeout)
		if err != nil {
			return res, fmt.Errorf("%s: %w", sc.name, err)
		}
		s.OfStoreCAS = s.JobsPerSecond / res.StoreCASPerSecond
		res.Scenarios[sc.name] = s
	}
	return res, nil
}

type world struct {
	a *app.App
	// jobs is where the bench watches its jobs: on DynamoDB a store of its
	// own, so that watching is not counted among the control plane's calls.
	jobs interface {
		ListJobs(context.Context, domain.JobFilter) ([]domain.Job, error)
	}
}

const benchConfig = `runners:
  small:
    image: ubuntu24-full-x64
    cpu: 2
  cold:
    image: ubuntu24-full-x64
    cpu: 4
pools:
  bench:
    runner: small
    schedule:
      - name: default
        stopped: %d
`

func newWorld(ctx context.Context, o Options) (*world, error) {
	cfg, err := config.Parse("bench.yml", []byte(fmt.Sprintf(benchConfig, o.Jobs)))
	if err != nil {
		return nil, err
	}
	a, err := app.New(ctx, app.Options{
		Config: cfg, Environment: "production", StorePath: filepath.Join(o.Dir, "bench.db"), Shared: o.Shared, WebhookSecret: secret,
		AdminToken: "bench", Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registry: prometheus.NewRegistry(), Latency: sim.Latency{},
		// The cloud is instant; a runner still takes the simulated agents' default
		// couple of seconds to register with GitHub, as a real one does.
		Agent: simagent.Options{},
	})
	if err != nil {
		return nil, err
	}
	w := &world{a: a, jobs: a.Store}
	if o.Shared != nil {
		st, err := watcher(ctx, *o.Shared)
		if err == nil {
			err = fresh(ctx, st, o.Shared.Table)
		}
		w.jobs = st
		if err != nil {
			a.Close()
			return nil, err
		}
	}
	return w, nil
}

// fresh refuses a table an earlier run left rows in: the bursts' job and
// delivery ids are fixed, so their jobs would be found done already and
// its instances would join the pool, and the figures would mix two runs.
func fresh(ctx context.Context, st *dynamodb.Store, table string) error {
	jobs, err := st.ListJobs(ctx, domain.JobFilter{})
	if err != nil {
		return err
	}
	ins, err := st.ListInstances(ctx, domain.InstanceFilter{})
	if err != nil {
		return err
	}
	if len(jobs)+len(ins) > 0 {
		return fmt.Errorf("table %s holds %d jobs and %d instances from an earlier run: bench needs a table of its own, fresh from bullpen aws bootstrap", table, len(jobs), len(ins))
	}
	return nil
}

// watcher opens the shared table a second time, uncounted.
func watcher(ctx context.Context, sh app.Shared) (*dynamodb.Store, error) {
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: sh.Region, Endpoint: sh.Endpoint})
	if err != nil {
		return nil, err
	}
	return dynamodb.New(awsdynamodb.NewFromConfig(cfg), sh.Table, clock.Real{}, dynamodb.Options{})
}

// fillPool converges the bench pool to n stopped instances.
func (w *world) fillPool(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		rep, err := w.a.Converger.Cycle(ctx)
		if err != nil {
			return fmt.Errorf("fill the pool: %w", err)
		}
		if len(rep.Pools) == 1 && rep.Pools[0].Counts.Stopped == n && rep.Pools[0].Plan.Empty() {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // let the simulated agents report warm
	}
	return fmt.Errorf("the pool did not reach %d stopped instances within %s", n, timeout)
}

// burst posts n signed queued webhooks and waits until every job is assigned.
func (w *world) burst(ctx context.Context, labelFmt string, first int64, n int, timeout time.Duration) (Scenario, error) {
	w.a.Sim.Cloud.ResetCalls()
	before := gatherCounts(w.a.Registry())
	h := w.a.Handler()
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, posters)
	for i := range n {
		id := first + int64(i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := post(h, id, fmt.Sprintf(labelFmt, id)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Scenario{}, err
	}
	posted := time.Since(begin)
	jobs, err := w.waitAssigned(ctx, first, n, timeout)
	if err != nil {
		return Scenario{}, err
	}
	after := gatherCounts(w.a.Registry())
	s := summarize(jobs)
	s.Seconds = time.Since(begin).Seconds()
	s.WebhookSeconds = posted.Seconds()
	s.InstancesStarted = int(before.grew(after, startedTotal))
	s.InstancesDetached = int(before.grew(after, detachedTotal))
	calls := w.a.Sim.Cloud.Calls()
	s.APICalls = map[string]int{}
	for _, op := range ec2Ops {
		s.APICalls[op] = calls[op]
	}
	for _, j := range jobs {
		if j.Via == domain.ViaCold {
			s.InstancesCreated++
		}
	}
	s.AWSCallsPerJob = perJob(before, after, awsCallsTotal, n)
	s.RefusedWritesPerJob = perJob(before, after, refusedTotal, n)
	return s, nil
}

func post(h http.Handler, id int64, label string) error {
	body, _ := json.Marshal(map[string]any{
		"action":       "queued",
		"workflow_job": map[string]any{"id": id, "run_id": id, "name": "bench", "labels": []string{label}, "status": "queued"},
		"repository":   map[string]any{"full_name": "bench/bench"},
	})
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("bench-%d", id))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		return fmt.Errorf("webhook for job %d: %d %s", id, rec.Code, rec.Body.String())
	}
	return nil
}

func (w *world) waitAssigned(ctx context.Context, first int64, n int, timeout time.Duration) ([]domain.Job, error) {
	deadline := time.Now().Add(timeout)
	for {
		list, err := w.jobs.ListJobs(ctx, domain.JobFilter{})
		if err != nil {
			return nil, err
		}
		var mine []domain.Job
		assigned := 0
		for _, j := range list {
			if j.ID >= first && j.ID < first+int64(n) {
				mine = append(mine, j)
				if !j.AssignedAt.IsZero() {
					assigned++
				}
			}
		}
		if assigned == n {
			return mine, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d jobs assigned after %s", assigned, n, timeout)
		}
		time.Sleep(100 * time.Millisecond) // the figures come from the jobs' own timestamps
	}
}

// summarize computes throughput, latency percentiles and double
// assignments from the jobs' own timestamps.
func summarize(jobs []domain.Job) Scenario {
	s := Scenario{Jobs: len(jobs)}
	var lat []float64
	first, last := jobs[0].QueuedAt, jobs[0].AssignedAt
	byInstance := map[string]int{}
	for _, j := range jobs {
		lat = append(lat, float64(j.AssignedAt.Sub(j.QueuedAt).Microseconds())/1000)
		if j.QueuedAt.Before(first) {
			first = j.QueuedAt
		}
		if j.AssignedAt.After(last) {
			last = j.AssignedAt
		}
		byInstance[j.InstanceID]++
	}
	for _, c := range byInstance {
		s.DoubleAssignments += c - 1
	}
	slices.Sort(lat)
	s.P50ms, s.P99ms = percentile(lat, 0.50), percentile(lat, 0.99)
	if d := last.Sub(first).Seconds(); d > 0 {
		s.JobsPerSecond = float64(len(jobs)) / d
	}
	return s
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// MeasureCAS times n guarded single-row transitions on fresh rows of s: the
// store's raw conditional-update rate.
func MeasureCAS(ctx context.Context, s domain.Store, n int) (float64, error) {
	rows := make([]domain.Instance, n)
	for i := range rows {
		rows[i] = domain.Instance{ID: fmt.Sprintf("cas-%06d", i), State: domain.StateReady, Role: domain.RoleOnDemand}
	}
	if err := s.CreateInstances(ctx, rows); err != nil {
		return 0, err
	}
	verbs := domain.NewLifecycle(domain.Deadlines{})
	start := time.Now()
	for i := range rows {
		c := verbs.ClaimIdle(rows[i].ID, "cas", start)
		if _, err := s.Transition(ctx, c.ID, c.Guard, c.Apply); err != nil {
			return 0, err
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	// Leave no trace the loops would act on.
	for i := range rows {
		cur, err := s.GetInstance(ctx, rows[i].ID)
		if err != nil {
			return 0, err
		}
		t := verbs.Terminate(cur, "store measurement", start)
		if cur, err = s.Transition(ctx, t.ID, t.Guard, t.Apply); err != nil {
			return 0, err
		}
		c := verbs.Close(cur)
		if _, err := s.Transition(ctx, c.ID, c.Guard, c.Apply); err != nil {
			return 0, err
		}
	}
	ids := make([]string, n)
	for i := range rows {
		ids[i] = rows[i].ID
	}
	return rate, s.DeleteInstances(ctx, ids)
}
