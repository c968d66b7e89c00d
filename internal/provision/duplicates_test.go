package provision

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// failAtOnce is an agent that gives up as soon as it is woken, before the
// provisioner looks at its registration: the agents service takes the
// instance out of service and sends its job back to the launch queue.
func failAtOnce(f *fixture, cloudID string) {
	sig := domain.Signal{CloudID: cloudID, Kind: domain.SignalFailed, Reason: "runner command not found"}
	if err := f.agents.Signal(f.Ctx, sig); err != nil {
		f.T.Errorf("failed: %v", err)
	}
}

// A new machine whose agent fails sends its job back once: the agents
// service requeues it with its own message and reason, and the provisioner
// sends no second message, which counted the attempt twice, overwrote the
// agent's reason, and could launch a second machine for the job.
func TestAJobItsFailedMachineSentBackIsNotSentAgain(t *testing.T) {
	f := newFixture(t)
	f.setAgent(failAtOnce)
	f.queueJobs(small, 100, 1)

	f.serve()

	j := f.Job(100)
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 1 || !strings.Contains(j.Reason, "runner command not found") {
		t.Fatalf("job %s on %q, attempts %d, reason %q; want queued once, for the agent's reason", j.Status, j.InstanceID, j.Attempts, j.Reason)
	}
	if st := f.Stats(domain.QueueLaunch); st.Visible+st.Delayed+st.InFlight != 1 {
		t.Fatalf("launch queue %+v: want the one message the agents service sent", st)
	}
	if counter(t, f.p.metrics.jobs, outcomeRequeued) != 0 || counter(t, f.p.metrics.jobs, outcomeDropped) != 1 {
		t.Fatal("the provisioner's message must be dropped, not requeued")
	}
}

// receiveOne takes one visible launch-queue message.
func (f *fixture) receiveOne() []domain.Message {
	f.T.Helper()
	msgs, err := f.Queue.Receive(f.Ctx, domain.QueueLaunch, 1, 5*time.Minute, 0)
	if err != nil || len(msgs) != 1 {
		f.T.Fatalf("received %d messages, err %v; want one", len(msgs), err)
	}
	return msgs
}

// A second message of a job, served by another provisioner while the
// first one's create call is in flight, launches no second machine: the
// job is marked with the instance launched for it, and the other message
// comes back once that launch is over, to be dropped.
func TestADuplicateMessageDuringACreateLaunchesNoSecondMachine(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	f.queueJobs(small, 100, 1)
	if err := f.Queue.Send(f.Ctx, domain.QueueLaunch, []domain.SendRequest{{Body: jobs.Encode(100), DedupID: "redelivered"}}); err != nil {
		t.Fatal(err)
	}
	first, second := f.receiveOne(), f.receiveOne()
	other := f.newProvisioner(nil, Options{ControllerID: "ctl-test", Wait: -1})
	served := false
	rc.onCreate = func(domain.LaunchSpec) {
		if !served {
			served = true
			other.Serve(f.Ctx, second)
		}
	}

	f.p.Serve(f.Ctx, first)

	if got := rc.fleets(); !slices.Equal(got, []int{1}) {
		t.Fatalf("fleet requests %v, want one machine for the job", got)
	}
	ins := f.Instances(domain.InstanceFilter{Runner: "small"})
	if len(ins) != 1 {
		t.Fatalf("%d instance rows, want 1", len(ins))
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, ins[0].ID)
	if counter(t, other.metrics.jobs, outcomeDeferred) != 1 {
		t.Fatal("the second message must be deferred")
	}
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 1 || st.Visible+st.InFlight != 0 {
		t.Fatalf("launch queue %+v: want the second message put off", st)
	}
	f.Clock.Advance(f.p.opts.Deadlines.Pending)
	f.serve()
	if got := rc.fleets(); len(got) != 1 || counter(t, f.p.metrics.jobs, outcomeDropped) != 1 {
		t.Fatalf("fleet requests %v: the put-off message must be dropped once its job is served", got)
	}
}

// markLaunched queues job id of class small and marks it launched on
// instanceID, as a provisioner does before its create call, writing no
// instance row; it returns the job as marked.
func (f *fixture) markLaunched(id int64, instanceID string) domain.Job {
	f.T.Helper()
	f.queueJobs(small, id, 1)
	m := f.p.verbs.LaunchFor(f.Job(id), instanceID)
	j, err := f.Store.TransitionJob(f.Ctx, m.ID, m.Guard, m.Apply)
	if err != nil {
		f.T.Fatal(err)
	}
	return j
}

// A job marked by a provisioner that died before writing its rows waits
// for the mark to end, then is served.
func TestAJobMarkedByAProvisionerThatDiedIsServedAfterTheMark(t *testing.T) {
	f := newFixture(t)
	f.markLaunched(100, "bp-never-written")

	f.serve()
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets while another launch may still serve the job", n)
	}
	f.Clock.Advance(f.p.opts.Deadlines.Pending)
	f.serve()

	in := f.Instances(domain.InstanceFilter{Job: "100"})
	if len(in) != 1 {
		t.Fatalf("%d instances for the job after its mark ended, want 1", len(in))
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, in[0].ID)
}

// The launch mark binds nothing: while its machine is launched, the job is
// queued and bound to no instance, for everything that reads InstanceID
// as the instance serving the job; the mark names the instance launched.
func TestALaunchMarkBindsNoInstance(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	f.queueJobs(small, 100, 1)
	var during domain.Job
	var readErr error
	rc.onCreate = func(domain.LaunchSpec) { during, readErr = f.Store.GetJob(f.Ctx, 100) }

	f.serve()

	ins := f.Instances(domain.InstanceFilter{Job: "100"})
	if readErr != nil || len(ins) != 1 {
		t.Fatalf("job read during the create call: %v; %d instances for it, want 1", readErr, len(ins))
	}
	if during.Status != domain.JobQueued || during.InstanceID != "" || during.LaunchedOn != ins[0].ID {
		t.Fatalf("job during its create call: %s, bound to %q, launched on %q; want queued, unbound, launched on %s",
			during.Status, during.InstanceID, during.LaunchedOn, ins[0].ID)
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, ins[0].ID)
}

// A provisioner killed between its create call and the handover leaves
// the job marked and its machine booting without a runner. The job's
// message, back after the visibility timeout, is put off only until the
// handover allowance has passed, not until that machine's booting
// deadline, and the job gets another machine.
func TestAJobWhoseProvisionerDiedAfterItsCreateCallIsServedOnceTheHandoverIsOverdue(t *testing.T) {
	f := newFixture(t)
	j := f.markLaunched(100, "bp-dead")
	ms, err := f.cloud.Create(f.Ctx, domain.LaunchSpec{Runner: small, ImageID: "ami-1", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	dead := domain.Instance{ID: "bp-dead", CloudID: ms[0].ID, Role: domain.RoleOnDemand, Runner: small.Name,
		State: domain.StateBooting, Job: j.Key(), Deadline: f.Clock.Now().Add(f.p.opts.Deadlines.Booting)}
	if err := f.Store.CreateInstances(f.Ctx, []domain.Instance{dead}); err != nil {
		t.Fatal(err)
	}
	f.cloud.ResetCalls()

	f.Clock.Advance(domain.HandoverAllowance / 2)
	f.serve()
	if n := f.cloud.Calls()[sim.OpCreateFleet]; n != 0 || counter(t, f.p.metrics.jobs, outcomeDeferred) != 1 {
		t.Fatalf("%d fleets within the handover allowance; want the message put off", n)
	}
	f.Clock.Advance(domain.HandoverAllowance / 2)
	f.serve()
	if n := f.cloud.Calls()[sim.OpCreateFleet]; n != 1 {
		t.Fatalf("%d fleets once the handover was overdue, want 1 (launch queue %+v)", n, f.Stats(domain.QueueLaunch))
	}
	ins := f.Instances(domain.InstanceFilter{Job: "100", States: []domain.State{domain.StateRunning}})
	if len(ins) != 1 || ins[0].ID == dead.ID {
		t.Fatalf("running instances for the job %+v, want a new one", ins)
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, ins[0].ID)
}
