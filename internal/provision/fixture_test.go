package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// small is the runner class most tests use: 2 vCPUs, 4 GiB, family c7a.
var small = domain.RunnerSpec{Name: "small", Image: "ubuntu-24.04", CPU: domain.Range{Min: 2, Max: 2},
	RAM: domain.Range{Min: 4, Max: 4}, Family: []string{"c7a"}}

// agentFunc plays an instance's agent when the provisioner wakes it.
type agentFunc func(f *fixture, cloudID string)

// fixture is a provisioner on the test world, the simulated cloud and
// GitHub, and the agents service that turns registered signals into state
// changes and registration wake-ups.
type fixture struct {
	*testworld.World
	cloud  *sim.Cloud
	gh     *ghsim.GitHub
	agents *agents.Service
	p      *Provisioner
	deps   Deps

	mu     sync.Mutex
	agent  agentFunc
	woken  []string
	agentW sync.WaitGroup // agents started from Notify
}

type fixtureOption func(*fixture, *Deps, *Options)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	f := &fixture{World: testworld.New(t, t0), agent: registerAtOnce}
	f.cloud = f.NewCloud(sim.Options{})
	f.gh = ghsim.New(f.Clock, ghsim.Options{})
	var err error
	f.agents, err = agents.New(f.Store, f.Queue, f.Clock, f.Log, nil, agents.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.agentW.Wait)
	f.deps = Deps{
		Store: f.Store, Queue: f.Queue, Cloud: f.cloud, GitHub: f.gh, Clock: f.Clock, Log: f.Log,
		Scope:         testworld.Scope,
		Notify:        f.notify,
		Registrations: f.agents.Registrations(),
	}
	o := Options{ControllerID: "ctl-test", Wait: -1}
	for _, fn := range opts {
		fn(f, &f.deps, &o)
	}
	f.p = f.newProvisioner(prometheus.NewRegistry(), o)
	return f
}

// newProvisioner builds another provisioner on the fixture's world (a
// second replica).
func (f *fixture) newProvisioner(reg prometheus.Registerer, o Options) *Provisioner {
	f.T.Helper()
	p, err := New(f.deps, reg, o)
	if err != nil {
		f.T.Fatal(err)
	}
	return p
}

func (f *fixture) notify(cloudID string) {
	f.mu.Lock()
	f.woken = append(f.woken, cloudID)
	agent := f.agent
	f.mu.Unlock()
	agent(f, cloudID)
}

func (f *fixture) setAgent(a agentFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agent = a
}

func (f *fixture) wokenIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.woken...)
}

// registerAtOnce is a healthy agent: woken with an assignment, it registers
// the runner and says so, from its own goroutine.
func registerAtOnce(f *fixture, cloudID string) {
	f.agentW.Add(1)
	go func() {
		defer f.agentW.Done()
		f.register(cloudID)
	}()
}

// silent is an agent that never answers.
func silent(*fixture, string) {}

// silentFor answers like registerAtOnce except on the given machines.
func silentFor(cloudIDs ...string) agentFunc {
	return func(f *fixture, cloudID string) {
		for _, id := range cloudIDs {
			if id == cloudID {
				return
			}
		}
		registerAtOnce(f, cloudID)
	}
}

func (f *fixture) register(cloudID string) {
	ins, err := f.agents.Next(f.Ctx, cloudID)
	if err != nil || ins.Kind != domain.InstructionRun {
		f.T.Errorf("agent %s: instruction %+v, err %v", cloudID, ins, err)
		return
	}
	sig := domain.Signal{CloudID: cloudID, Kind: domain.SignalRegistered, Job: domain.JobKey(ins.Assignment.JobID)}
	if err := f.agents.Signal(f.Ctx, sig); err != nil {
		f.T.Errorf("agent %s: registered: %v", cloudID, err)
	}
}

// reusable records n ready instances of class spec, each with a live machine
// and a fresh heartbeat, and offers them to the class's resource pool.
func (f *fixture) reusable(spec domain.RunnerSpec, n int, edit func(*domain.Instance)) []domain.Instance {
	f.T.Helper()
	ms, err := f.cloud.Create(f.Ctx, domain.LaunchSpec{Runner: spec, ImageID: "ami-1", Count: n})
	if err != nil {
		f.T.Fatal(err)
	}
	now := f.Clock.Now()
	rows := make([]domain.Instance, n)
	for i, m := range ms {
		rows[i] = domain.Instance{ID: fmt.Sprintf("bp-%s-%d-%s", spec.Name, i, m.ID[2:8]), CloudID: m.ID, Role: domain.RoleOnDemand,
			Runner: spec.Name, State: domain.StateReady, Deadline: now.Add(10 * time.Minute), Heartbeat: now,
			InstanceType: m.InstanceType, UsageClass: m.UsageClass, CPU: spec.CPU.Min, MemoryMiB: spec.RAM.Min * 1024, JobsServed: 1}
		if edit != nil {
			edit(&rows[i])
		}
	}
	if err := f.Store.CreateInstances(f.Ctx, rows); err != nil {
		f.T.Fatal(err)
	}
	for _, in := range rows {
		f.offer(in)
	}
	f.cloud.ResetCalls()
	return rows
}

func entryOf(in domain.Instance) domain.ResourcePoolEntry {
	return domain.ResourcePoolEntry{InstanceID: in.ID, CloudID: in.CloudID, UsageClass: in.UsageClass,
		InstanceType: in.InstanceType, CPU: in.CPU, Mem: in.MemoryMiB,
		ResourceClass: domain.ResourceClassFor(in.CPU), Threshold: in.Deadline}
}

// offer puts in's entry in its class's resource pool.
func (f *fixture) offer(in domain.Instance) {
	f.T.Helper()
	if err := jobs.OfferToResourcePool(f.Ctx, f.Queue, in.Runner, entryOf(in)); err != nil {
		f.T.Fatal(err)
	}
}

// queueJobs records n queued launch jobs of spec and sends them to the
// launch queue.
func (f *fixture) queueJobs(spec domain.RunnerSpec, first int64, n int) []domain.Job {
	f.T.Helper()
	js := make([]domain.Job, n)
	for i := range js {
		js[i] = domain.Job{ID: first + int64(i), RunID: 7, Repo: "acme/app", Labels: []string{"runs-on=7/runner=" + spec.Name},
			Status: domain.JobQueued, Route: domain.RouteLaunch, Runner: spec.Name, Spec: spec}
	}
	return f.Enqueue(domain.QueueLaunch, js)
}

// receive takes every visible launch-queue message, as Run would.
func (f *fixture) receive() []domain.Message {
	f.T.Helper()
	msgs, err := f.Queue.Receive(f.Ctx, domain.QueueLaunch, 1000, 5*time.Minute, 0)
	if err != nil {
		f.T.Fatal(err)
	}
	return msgs
}

// serve receives the launch queue and serves it to the end.
func (f *fixture) serve() {
	f.T.Helper()
	f.p.Serve(f.Ctx, f.receive())
}

// serveAsync serves in the background; the channel closes when Serve returns.
func (f *fixture) serveAsync(p *Provisioner, msgs []domain.Message) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(f.Ctx, msgs)
	}()
	return done
}

// poolEntries returns the instance ids of the class's visible
// resource-pool entries, leaving them there.
func (f *fixture) poolEntries(class string) []string {
	f.T.Helper()
	var ids []string
	for _, m := range f.Peek(domain.ResourcePoolQueue(class), 100) {
		var e domain.ResourcePoolEntry
		if err := json.Unmarshal(m.Body, &e); err != nil {
			f.T.Fatal(err)
		}
		ids = append(ids, e.InstanceID)
	}
	return ids
}

func (f *fixture) wantJob(id int64, status domain.JobStatus, via domain.Via, instanceID string) domain.Job {
	f.T.Helper()
	j := f.Job(id)
	if j.Status != status || j.Via != via || j.InstanceID != instanceID {
		f.T.Fatalf("job %d: status %s via %q instance %q; want %s via %q instance %q (reason %q)",
			id, j.Status, j.Via, j.InstanceID, status, via, instanceID, j.Reason)
	}
	return j
}

func (f *fixture) wantState(id string, want domain.State) domain.Instance {
	f.T.Helper()
	in := f.Instance(id)
	if in.State != want {
		f.T.Fatalf("instance %s: %s (job %q, reason %q), want %s", id, in.State, in.Job, in.Reason, want)
	}
	return in
}

// counter reads one labelled counter of a provisioner's metrics.
func counter(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// recordingCloud notes every fleet request and lets a test look at the
// store at the moment of the call.
type recordingCloud struct {
	domain.Cloud
	mu       sync.Mutex
	counts   []int
	images   []string
	onCreate func(domain.LaunchSpec)
}

func (c *recordingCloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	c.mu.Lock()
	c.counts = append(c.counts, spec.Count)
	c.images = append(c.images, spec.ImageID)
	hook := c.onCreate
	c.mu.Unlock()
	if hook != nil {
		hook(spec)
	}
	return c.Cloud.Create(ctx, spec)
}

func (c *recordingCloud) fleets() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.counts...)
}

// imageIDs returns the image id of every fleet request, in order.
func (c *recordingCloud) imageIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.images...)
}

// withRecordingCloud wraps the fixture's cloud.
func withRecordingCloud(rc **recordingCloud) fixtureOption {
	return func(_ *fixture, d *Deps, _ *Options) {
		*rc = &recordingCloud{Cloud: d.Cloud}
		d.Cloud = *rc
	}
}

func withOptions(edit func(*Options)) fixtureOption {
	return func(_ *fixture, _ *Deps, o *Options) { edit(o) }
}

// withImages replaces the fixture's cloud by one that knows only these
// images (name → id). It must come before options that wrap the cloud.
func withImages(images map[string]string) fixtureOption {
	return func(f *fixture, d *Deps, _ *Options) {
		f.cloud.Close()
		f.cloud = f.NewCloud(sim.Options{Images: images})
		d.Cloud = f.cloud
	}
}

// withLog sends the provisioner's log to buf.
func withLog(buf *testlog.Buffer) fixtureOption {
	return func(_ *fixture, d *Deps, _ *Options) {
		d.Log = slog.New(slog.NewTextHandler(buf, nil))
	}
}
