package provision

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

func TestCreationMakesOneFleetForTheRestOfAClass(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	var pendingAtCall []domain.Instance
	rc.onCreate = func(spec domain.LaunchSpec) {
		for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
			if in.LaunchID == spec.ClientToken {
				pendingAtCall = append(pendingAtCall, in)
			}
		}
	}
	var mu sync.Mutex
	atNotify := map[string]domain.Instance{}
	f.setAgent(func(f *fixture, cloudID string) {
		in := f.Instances(domain.InstanceFilter{CloudID: cloudID})[0]
		mu.Lock()
		atNotify[cloudID] = in
		mu.Unlock()
		registerAtOnce(f, cloudID)
	})
	f.queueJobs(small, 100, 3)

	f.serve()

	if got := rc.fleets(); !slices.Equal(got, []int{3}) {
		t.Fatalf("fleet requests %v, want one for 3", got)
	}
	// Rows first, bound to their jobs, so a crash leaves nothing unrecorded.
	if len(pendingAtCall) != 3 {
		t.Fatalf("%d rows recorded before the fleet call, want 3", len(pendingAtCall))
	}
	wantPendingRowsPerJob(t, pendingAtCall)
	for id := int64(100); id < 103; id++ {
		j := f.Job(id)
		if j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Fatalf("job %d: %s via %q (%s)", id, j.Status, j.Via, j.Reason)
		}
		in := f.wantState(j.InstanceID, domain.StateRunning)
		before := atNotify[in.CloudID]
		if before.State != domain.StateBooting || before.ID != in.ID || before.Job != j.Key() ||
			!before.Deadline.Equal(t0.Add(10*time.Minute)) || before.RunnerName != j.RunnerName || before.RunnerConfig == "" {
			t.Fatalf("instance when its agent was woken: %s %s job %q runner %q (config set: %t)",
				before.ID, before.State, before.Job, before.RunnerName, before.RunnerConfig != "")
		}
		f.wantRunner(in.ID, j)
		m, ok := f.cloud.Get(in.CloudID)
		if !ok || m.State != domain.CloudRunning || m.Tags[domain.TagLaunch] != in.LaunchID ||
			m.Tags[domain.TagController] != "ctl-test" || m.Tags[domain.TagRunner] != "small" {
			t.Fatalf("machine %+v", m)
		}
	}
	if counter(t, f.p.metrics.jobs, "cold") != 3 || counter(t, f.p.metrics.fleets, "fulfilled", "") != 1 ||
		counter(t, f.p.metrics.exhausted, "global") != 3 {
		t.Fatal("metrics do not show three exhausted searches, one fleet and three cold starts")
	}
}

func wantPendingRowsPerJob(t *testing.T, rows []domain.Instance) {
	t.Helper()
	jobsBound := map[string]bool{}
	for _, in := range rows {
		if in.State != domain.StatePending || in.CloudID != "" || in.Runner != "small" || in.Role != domain.RoleOnDemand {
			t.Fatalf("row at the call: %+v", in)
		}
		jobsBound[in.Job] = true
	}
	if len(jobsBound) != len(rows) {
		t.Fatalf("rows bound to jobs %v", jobsBound)
	}
}

func TestCreationSplitsFleetsByClassAndBatchSize(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc), withOptions(func(o *Options) { o.CreateBatch = 2 }))
	large := domain.RunnerSpec{Name: "large", Image: "ubuntu-24.04", CPU: domain.Range{Min: 16}, RAM: domain.Range{Min: 64}}
	f.queueJobs(small, 100, 3)
	f.queueJobs(large, 200, 1)

	f.serve()

	got := rc.fleets()
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 1, 2}) {
		t.Fatalf("fleet requests %v, want small 2+1 and large 1", got)
	}
	for _, id := range []int64{100, 101, 102, 200} {
		if j := f.Job(id); j.Via != domain.ViaCold || j.Status != domain.JobAssigned {
			t.Fatalf("job %d: %s via %q", id, j.Status, j.Via)
		}
	}
}

func TestCreatedInstancesThatNeverRegisterAreTerminated(t *testing.T) {
	f := newFixture(t)
	f.setAgent(silent)
	f.queueJobs(small, 100, 2)
	done := f.serveAsync(f.p, f.receive())
	f.Clock.BlockUntil(4)
	f.Clock.Advance(5*time.Minute - time.Second)
	f.Clock.BlockUntil(4)
	if j := f.Job(100); j.Status != domain.JobAssigned {
		t.Fatalf("job gave up before the creation timeout: %s", j.Status)
	}
	f.Clock.Advance(time.Second)
	<-done

	for id := int64(100); id < 102; id++ {
		j := f.Job(id)
		if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 1 || !strings.Contains(j.Reason, "did not register") {
			t.Fatalf("job %d: %s on %q, attempts %d: %s", id, j.Status, j.InstanceID, j.Attempts, j.Reason)
		}
	}
	for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
		if in.State != domain.StateTerminating {
			t.Fatalf("instance %s is %s", in.ID, in.State)
		}
	}
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 2 || st.InFlight != 0 {
		t.Fatalf("launch queue %+v: both jobs go back with a delay", st)
	}
	if runners, _ := f.gh.ListRunners(f.Ctx, domain.Scope{Owner: "acme", Repo: "app"}); len(runners) != 0 {
		t.Fatalf("runner registrations left behind: %+v", runners)
	}
}

// A fleet is a batch of independent jobs: when the cloud fills part of it,
// the jobs it filled are served and the others requeued, where every
// machine that came was terminated and every job requeued. The next fleet
// asks for all it needs: a shortage costs nothing more than what did not
// come.
func TestAPartiallyFulfilledFleetServesTheJobsItFilled(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	f.cloud.SetCapacity(2)
	f.queueJobs(small, 100, 5)

	f.serve()

	if got := rc.fleets(); !slices.Equal(got, []int{5}) {
		t.Fatalf("fleet requests %v", got)
	}
	if n := len(f.cloud.Instances()); n != 2 {
		t.Fatalf("%d machines launched, want the 2 that fitted", n)
	}
	rows := f.Instances(domain.InstanceFilter{Runner: "small"})
	if len(rows) != 5 {
		t.Fatalf("%d rows", len(rows))
	}
	served, requeued := 0, 0
	for id := int64(100); id < 105; id++ {
		j := f.Job(id)
		switch {
		case j.Status == domain.JobAssigned && j.Via == domain.ViaCold:
			f.wantState(j.InstanceID, domain.StateRunning)
			served++
		case j.Status == domain.JobQueued && j.InstanceID == "" && j.Attempts == 1 && strings.Contains(j.Reason, "insufficient capacity"):
			requeued++
		default:
			t.Fatalf("job %d: %s on %q, attempts %d: %s", id, j.Status, j.InstanceID, j.Attempts, j.Reason)
		}
	}
	if served != 2 || requeued != 3 {
		t.Fatalf("%d jobs served and %d requeued, want 2 and 3", served, requeued)
	}
	for _, in := range rows {
		if in.State != domain.StateRunning && in.State != domain.StateTerminated {
			t.Fatalf("row %s left %s", in.ID, in.State)
		}
	}
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 3 {
		t.Fatalf("launch queue %+v", st)
	}
	if rs := f.runners(); len(rs) != 2 {
		t.Fatalf("%d runners registered, want those of the 2 jobs served", len(rs))
	}
	if counter(t, f.p.metrics.fleets, "partial", "capacity") != 1 || counter(t, f.p.metrics.jobs, "cold") != 2 || counter(t, f.p.metrics.jobs, "requeued") != 3 {
		t.Fatal("metrics do not show one partial fleet, two cold starts and three requeued jobs")
	}

	f.cloud.SetCapacity(0)
	f.Clock.Advance(2 * time.Second) // the first retry's backoff
	f.serve()
	if got := rc.fleets(); !slices.Equal(got, []int{5, 3}) {
		t.Fatalf("fleet requests %v, want the 3 jobs left in one", got)
	}
	for id := int64(100); id < 105; id++ {
		if j := f.Job(id); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Fatalf("job %d: %s via %q", id, j.Status, j.Via)
		}
	}
	if n := len(f.cloud.Instances()); n != 5 {
		t.Fatalf("%d machines for 5 jobs", n)
	}
}

// Jobs of one runner recorded under two versions of its spec (a
// configuration change between them) are launched in a fleet per version,
// each with its own spec, where every job got the first job's machine.
func TestJobsOfOneRunnerWithTwoSpecsGetAFleetEach(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	var mu sync.Mutex
	var specs []domain.RunnerSpec
	rc.onCreate = func(s domain.LaunchSpec) { mu.Lock(); specs = append(specs, s.Runner); mu.Unlock() }
	bigger := small
	bigger.CPU, bigger.RAM = domain.Range{Min: 8, Max: 8}, domain.Range{Min: 16, Max: 16}
	f.queueJobs(small, 100, 2)
	f.queueJobs(bigger, 102, 1)

	f.serve()

	if got := rc.fleets(); len(got) != 2 || got[0]+got[1] != 3 {
		t.Fatalf("fleet requests %v, want one per spec", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(specs, func(s domain.RunnerSpec) bool { return s.CPU == bigger.CPU }) {
		t.Fatalf("fleets launched with %+v: none with the second spec", specs)
	}
	for id, want := range map[int64]domain.RunnerSpec{100: small, 101: small, 102: bigger} {
		j := f.wantJob(id, domain.JobAssigned, domain.ViaCold, f.Job(id).InstanceID)
		if in := f.Instance(j.InstanceID); in.CPU != want.CPU.Min || in.MemoryMiB != want.RAM.Min*1024 {
			t.Fatalf("job %d asked for %d CPUs and %d GiB, got an instance of %d and %d MiB", id, want.CPU.Min, want.RAM.Min, in.CPU, in.MemoryMiB)
		}
	}
}

// The fleets of one batch are launched at once: none waits for the
// machines of another to register.
func TestTheFleetsOfABatchAreLaunchedAtOnce(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc), withOptions(func(o *Options) { o.CreateBatch = 2 }))
	asked := make(chan struct{}, 3)
	rc.onCreate = func(domain.LaunchSpec) { asked <- struct{}{} }
	f.setAgent(silent) // no machine registers while the fleets are asked
	f.queueJobs(small, 100, 6)

	done := f.serveAsync(f.p, f.receive())
	for range 3 {
		select {
		case <-asked:
		case <-time.After(10 * time.Second):
			t.Fatalf("fleet requests %v: the others wait for the first fleet's machines", rc.fleets())
		}
	}
	if got := rc.fleets(); !slices.Equal(got, []int{2, 2, 2}) || !f.Clock.Now().Equal(t0) {
		t.Fatalf("fleet requests %v at %s", got, f.Clock.Now())
	}
	f.Clock.BlockUntil(12) // every machine's registration wait
	f.Clock.Advance(f.p.opts.CreationTimeout)
	<-done
}

func TestAFleetRefusedForOtherReasonsDoesNotShrinkTheNext(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	f.cloud.FailNext(sim.OpCreateFleet, 1, domain.ErrThrottled)
	f.queueJobs(small, 100, 3)
	f.serve()
	f.Clock.Advance(2 * time.Second)
	f.serve()
	if got := rc.fleets(); !slices.Equal(got, []int{3, 3}) {
		t.Fatalf("fleet requests %v, want 3 then 3", got)
	}
	for _, in := range f.Instances(domain.InstanceFilter{Runner: "small", States: []domain.State{domain.StatePending}}) {
		t.Fatalf("row %s of the refused fleet left pending", in.ID)
	}
}

// halfRecorded fails every transition of a batch after the first, as a
// store might when the fleet call went through but the write did not.
type halfRecorded struct{ Store }

func (s halfRecorded) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	res, err := s.Store.TransitionBatch(ctx, reqs[:1])
	if err != nil {
		return nil, err
	}
	for range reqs[1:] {
		res = append(res, domain.TransitionResult{Err: errors.New("disk full")})
	}
	return res, nil
}

func TestAFleetThatCannotBeRecordedLeavesNoRowBehind(t *testing.T) {
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) { d.Store = halfRecorded{d.Store} })
	f.queueJobs(small, 100, 2)
	f.serve()
	for _, m := range f.cloud.Instances() {
		if m.State != domain.CloudTerminated {
			t.Fatalf("machine %s left %s", m.ID, m.State)
		}
	}
	for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
		if in.State != domain.StateTerminating && in.State != domain.StateTerminated {
			t.Fatalf("row %s (cloud id %q) left %s for job %q", in.ID, in.CloudID, in.State, in.Job)
		}
	}
	for id := int64(100); id < 102; id++ {
		if j := f.Job(id); j.Status != domain.JobQueued || j.Attempts != 1 {
			t.Fatalf("job %d: %s attempts %d", id, j.Status, j.Attempts)
		}
	}
}

// Pools roll onto a newly published image; cold starts must too, so an
// image is resolved afresh for every batch served, and once within it.
func TestColdStartsUseTheImageCurrentWhenTheirBatchIsServed(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc), withOptions(func(o *Options) { o.CreateBatch = 1 }))
	f.queueJobs(small, 100, 2)
	f.serve()
	first := rc.imageIDs()
	if len(first) != 2 || first[0] != first[1] {
		t.Fatalf("fleets of one batch launched images %v, want one image twice", first)
	}
	if n := f.cloud.Calls()[sim.OpDescribeImages]; n != 1 {
		t.Fatalf("%d image look-ups for one batch, want 1", n)
	}

	published := f.cloud.PublishImage(small.Image)
	f.queueJobs(small, 200, 1)
	f.serve()
	if got := rc.imageIDs(); len(got) != 3 || got[2] != published {
		t.Fatalf("after a new image was published the next cold start launched %v, want %s", got[2:], published)
	}
	if j := f.Job(200); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
		t.Fatalf("job 200: %s via %q (%s)", j.Status, j.Via, j.Reason)
	}
}

// A runner registration GitHub refuses for its rate limit costs no machine
// and holds up no other job of its wave: their machines are launched at
// once, and the refused job goes back to the launch queue, its launch mark
// over, until the limit lifts, to get its one machine then. Waiting in
// place held the whole wave, while the runners registered for the others
// were held by no instance row, and could outlive the job's mark.
func TestARateLimitedRegistrationWaitsInTheQueueAndHoldsUpNoOtherJob(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	f.setAgent(registerAtOnce)
	reset := t0.Add(45 * time.Second)
	f.gh.FailNext(ghsim.OpRegisterRunner, 1, &ghsim.RateLimitError{Reset: reset})
	asked := make(chan time.Time, 2)
	rc.onCreate = func(domain.LaunchSpec) { asked <- f.Clock.Now() }
	f.queueJobs(small, 100, 5)

	done := f.serveAsync(f.p, f.receive())
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a watchdog, not a wait for something
		f.Clock.Advance(45 * time.Second)
		<-done
		t.Fatalf("the wave waited for one job's rate limit: fleet requests %v", rc.fleets())
	}
	if got, at := rc.fleets(), <-asked; !slices.Equal(got, []int{4}) || !at.Equal(t0) {
		t.Fatalf("fleet requests %v, the first at %s; want the 4 registered jobs' fleet at once", got, at)
	}
	var limited []domain.Job
	for id := int64(100); id < 105; id++ {
		if j := f.Job(id); j.Status == domain.JobQueued {
			limited = append(limited, j)
		}
	}
	if len(limited) != 1 {
		t.Fatalf("%d jobs left queued, want the one whose registration was refused", len(limited))
	}
	j := limited[0]
	if j.InstanceID != "" || j.LaunchedOn != "" || j.Attempts != 1 || !strings.Contains(j.Reason, "rate limit") {
		t.Fatalf("refused job on %q, launched on %q, attempts %d (%s); want it back in the queue, its mark over",
			j.InstanceID, j.LaunchedOn, j.Attempts, j.Reason)
	}
	if n := len(f.Instances(domain.InstanceFilter{Runner: "small"})); n != 4 {
		t.Fatalf("%d instance rows, want none for the refused job", n)
	}
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 1 || st.Visible+st.InFlight != 0 {
		t.Fatalf("launch queue %+v: want the refused job's message put off", st)
	}

	f.Clock.Advance(reset.Sub(f.Clock.Now()) - time.Second)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 0 {
		t.Fatalf("launch queue %+v: the refused job came back before the limit lifted", st)
	}
	f.Clock.Advance(time.Second)
	f.serve()
	j = f.Job(j.ID)
	if j.Status != domain.JobAssigned || j.Via != domain.ViaCold || j.Attempts != 1 {
		t.Fatalf("job %s via %q, attempts %d (%s), want assigned on its first machine", j.Status, j.Via, j.Attempts, j.Reason)
	}
	if got := rc.fleets(); !slices.Equal(got, []int{4, 1}) {
		t.Fatalf("fleet requests %v, want one more machine once the limit lifted", got)
	}
	if in := f.Instance(j.InstanceID); in.State != domain.StateRunning {
		t.Fatalf("instance %+v, want the one machine running the job", in)
	}
}

// A failed fleet says why, in a bounded set of words.
func TestAFailedFleetIsCountedByCause(t *testing.T) {
	for cause, err := range map[string]error{
		"capacity":  domain.ErrInsufficientCapacity,
		"throttled": domain.ErrThrottled,
		"invalid":   domain.ErrInvalidRequest,
		"other":     errors.New("connection reset by peer"),
	} {
		t.Run(cause, func(t *testing.T) {
			f := newFixture(t)
			f.cloud.FailNext(sim.OpCreateFleet, 1, err)
			f.queueJobs(small, 100, 1)
			f.serve()
			if got := counter(t, f.p.metrics.fleets, "failed", cause); got != 1 {
				t.Fatalf("%v fleets failed for %s, want 1", got, cause)
			}
		})
	}
}

// New machines whose runner never registers are counted, and the job's
// retry names the machine it gave up on; a job cancelled while its
// machine boots is no such failure.
func TestNewMachinesThatNeverRegisterAreCounted(t *testing.T) {
	unregistered := func(f *fixture) float64 {
		var m dto.Metric
		if err := f.p.metrics.unregistered.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	var log testlog.Buffer
	f := newFixture(t, withLog(&log))
	f.setAgent(silent)
	f.queueJobs(small, 100, 1)
	done := f.serveAsync(f.p, f.receive())
	f.Clock.BlockUntil(2) // the registration wait
	f.Clock.Advance(f.p.opts.CreationTimeout)
	<-done
	if got := unregistered(f); got != 1 {
		t.Fatalf("%v machines counted as never registering, want 1", got)
	}
	in := f.Instances(domain.InstanceFilter{Runner: "small"})[0]
	if line := logLine(log.String(), "launch job not served"); !strings.Contains(line, "instance="+in.ID) {
		t.Fatalf("the retry does not name instance %s:\n%s", in.ID, log.String())
	}

	cancelled := newFixture(t)
	cancelled.setAgent(cancelOnWake)
	cancelled.queueJobs(small, 100, 1)
	cancelled.serve()
	if got := unregistered(cancelled); got != 0 {
		t.Fatalf("a machine whose job was cancelled counted as never registering")
	}
}

// A job that waited is launched with its runner as the configuration in
// force now gives it, not as it was when the job arrived: the operator's
// change of a family out of capacity reaches the backlog too. A job the
// configuration no longer serves keeps the machine it arrived with.
func TestAJobIsLaunchedWithItsRunnerAsNowConfigured(t *testing.T) {
	var rc *recordingCloud
	changed := small
	changed.Family = []string{"c7i"}
	var mu sync.Mutex
	var launched []domain.RunnerSpec
	f := newFixture(t, withRecordingCloud(&rc), func(_ *fixture, d *Deps, _ *Options) {
		d.Respec = func(j domain.Job) (string, domain.RunnerSpec, bool) {
			if j.ID == 101 {
				return "", domain.RunnerSpec{}, false
			}
			return changed.Name, changed, true
		}
	})
	rc.onCreate = func(spec domain.LaunchSpec) {
		mu.Lock()
		defer mu.Unlock()
		launched = append(launched, spec.Runner)
	}
	f.queueJobs(small, 100, 2)
	f.serve()
	if len(launched) != 2 {
		t.Fatalf("%d fleets launched, want one for each version of the runner", len(launched))
	}
	var families []string
	for _, r := range launched {
		families = append(families, r.Family...)
	}
	slices.Sort(families)
	if !slices.Equal(families, []string{"c7a", "c7i"}) {
		t.Errorf("fleets launched on families %v, want c7i for job 100 and c7a for job 101", families)
	}
	for _, id := range []int64{100, 101} {
		if j := f.Job(id); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Errorf("job %d: %s via %q (%s)", id, j.Status, j.Via, j.Reason)
		}
	}
}

// large is small as an operator may change it while jobs wait: another
// class on another family, whose interrupted jobs are not re-run.
var large = domain.RunnerSpec{Name: "large", Image: "ubuntu-24.04", CPU: domain.Range{Min: 2, Max: 2},
	RAM: domain.Range{Min: 4, Max: 4}, Family: []string{"c7i"}, Retry: domain.RetryNever}

// respecTo makes every job's runner, as the configuration in force gives
// it, spec.
func respecTo(spec domain.RunnerSpec) fixtureOption {
	return func(_ *fixture, d *Deps, _ *Options) {
		d.Respec = func(domain.Job) (string, domain.RunnerSpec, bool) { return spec.Name, spec, true }
	}
}

// wantServedWith fails unless job id's row names spec as its runner, the
// one its instance runs: the API, the dashboard and the re-run of a job
// whose spot machine is taken back read the row.
func (f *fixture) wantServedWith(id int64, spec domain.RunnerSpec) {
	f.T.Helper()
	j := f.Job(id)
	in := f.Instance(j.InstanceID)
	if j.Runner != spec.Name || in.Runner != spec.Name || !slices.Equal(j.Spec.Family, spec.Family) {
		f.T.Errorf("job %d on %s: its row says runner %q on %v, want %q on %v", id, in.ID, j.Runner, j.Spec.Family, spec.Name, spec.Family)
	}
	if j.Spec.RerunsInterrupted() != spec.RerunsInterrupted() {
		f.T.Errorf("job %d: re-run when interrupted %t, its runner now says %t", id, j.Spec.RerunsInterrupted(), spec.RerunsInterrupted())
	}
}

// A job whose runner changed while it waited is launched on the runner as
// now configured, and its row says so from its launch mark on; the change
// is logged once, though the job's message is read twice.
func TestARespecifiedJobIsRecordedWithTheRunnerItIsLaunchedOn(t *testing.T) {
	var log testlog.Buffer
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc), withLog(&log), respecTo(large))
	var launched []domain.RunnerSpec
	rc.onCreate = func(spec domain.LaunchSpec) { launched = append(launched, spec.Runner) }
	f.cloud.FailNext(sim.OpCreateFleet, 1, domain.ErrThrottled)
	f.queueJobs(small, 100, 1)
	f.serve()
	if j := f.Job(100); j.Status != domain.JobQueued || j.Runner != "large" || j.Spec.RerunsInterrupted() {
		t.Fatalf("job 100 after a refused fleet: %s on runner %q, re-run when interrupted %t; want queued, marked for large",
			j.Status, j.Runner, j.Spec.RerunsInterrupted())
	}
	f.Clock.Advance(2 * time.Second)
	f.serve()
	if len(launched) != 2 || !slices.Equal(launched[1].Family, large.Family) {
		t.Fatalf("fleets launched on %v, want two on the runner as now configured", launched)
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, f.Job(100).InstanceID)
	f.wantServedWith(100, large)
	if got := log.Lines("a job is launched with its runner as now configured", "job=100"); len(got) != 1 {
		t.Errorf("the change of job 100's runner logged %d times, want once:\n%s", len(got), log.String())
	}
}

// A job served by a reused instance of its runner as now configured says
// so on its row from its handover.
func TestARespecifiedJobIsRecordedWithTheRunnerOfTheInstanceItReuses(t *testing.T) {
	f := newFixture(t, respecTo(large))
	in := f.reusable(large, 1, nil)[0]
	f.queueJobs(small, 100, 1)
	f.serve()
	f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID)
	f.wantServedWith(100, large)
}

// A runner changed only in its retry setting makes the same machine, but
// the job's row takes the change all the same, and the log says it.
func TestAJobWhoseRunnerNowDoesNotRetryIsRecordedSo(t *testing.T) {
	var log testlog.Buffer
	noRetry := small
	noRetry.Retry = domain.RetryNever
	f := newFixture(t, withLog(&log), respecTo(noRetry))
	f.queueJobs(small, 100, 1)
	f.serve()
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, f.Job(100).InstanceID)
	f.wantServedWith(100, noRetry)
	if got := log.Lines("a job is launched with its runner as now configured", "job=100", "retry=false"); len(got) != 1 {
		t.Errorf("the change of job 100's retry logged %d times, want once:\n%s", len(got), log.String())
	}
}
