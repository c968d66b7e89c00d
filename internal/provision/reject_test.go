package provision

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// A job the cloud will never serve as it asks is rejected with the reason,
// not retried until GitHub gives up on it.
func TestJobsTheCloudCannotServeAreRejected(t *testing.T) {
	known := map[string]string{"ubuntu-24.04": "ami-0123456789abcdef0"}
	for _, tc := range []struct {
		name  string
		image string
		setup func(f *fixture)
		why   []string // in the job's reason and the log
	}{
		{name: "the image does not resolve", image: "ubuntu-99.04",
			why: []string{`image "ubuntu-99.04"`, "does not resolve"}},
		{name: "no image at all", image: "",
			why: []string{`image ""`, "does not resolve"}},
		{name: "the cloud refuses the launch as invalid", image: "ubuntu-24.04",
			setup: func(f *fixture) { f.cloud.FailNext(sim.OpCreateFleet, 1, domain.ErrInvalidRequest) },
			why:   []string{"invalid", "small"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log testlog.Buffer
			f := newFixture(t, withImages(known), withLog(&log))
			if tc.setup != nil {
				tc.setup(f)
			}
			spec := small
			spec.Image = tc.image
			f.queueJobs(spec, 100, 2)

			f.serve()

			for id := int64(100); id < 102; id++ {
				j := f.Job(id)
				if j.Status != domain.JobRejected || j.InstanceID != "" || j.Attempts != 0 {
					t.Fatalf("job %d: %s on %q, attempts %d (%s); want rejected", id, j.Status, j.InstanceID, j.Attempts, j.Reason)
				}
				for _, w := range tc.why {
					if !strings.Contains(j.Reason, w) {
						t.Fatalf("job %d reason %q does not say %q", id, j.Reason, w)
					}
				}
			}
			line := logLine(log.String(), "launch job rejected")
			if reason := "reason=" + strconv.Quote(f.Job(100).Reason); !strings.Contains(line, "level=WARN") || !strings.Contains(line, reason) {
				t.Fatalf("no warning with %s in the log:\n%s", reason, log.String())
			}
			if got := counter(t, f.p.metrics.jobs, "rejected"); got != 2 || counter(t, f.p.metrics.jobs, "requeued") != 0 {
				t.Fatalf("metrics: %v rejected, want 2 and none requeued", got)
			}
			for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
				if in.State != domain.StateTerminated {
					t.Fatalf("row %s of the refused fleet left %s", in.ID, in.State)
				}
			}
			// Never requeued: nothing comes back, however long one waits.
			f.Clock.Advance(time.Hour)
			if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
				t.Fatalf("launch queue %+v: a rejected job must not come back", st)
			}
		})
	}
}

// Failures that may pass are still retried.
func TestTransientCloudFailuresAreRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   string
		err  error
	}{
		{"image lookup throttled", sim.OpDescribeImages, domain.ErrThrottled},
		{"fleet throttled", sim.OpCreateFleet, domain.ErrThrottled},
		{"no capacity", sim.OpCreateFleet, domain.ErrInsufficientCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.cloud.FailNext(tc.op, 1, tc.err)
			f.queueJobs(small, 100, 1)
			f.serve()
			f.wantRequeued(100, tc.err.Error())
			if counter(t, f.p.metrics.jobs, "rejected") != 0 {
				t.Fatal("a transient failure counted as a rejection")
			}
		})
	}
}

// A job that moved on before its rejection is left as it is.
func TestARejectionDoesNotOverrideAJobThatMovedOn(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	rc.onCreate = func(domain.LaunchSpec) {
		if err := f.agents.Finish(f.Ctx, 100, "cancelled"); err != nil {
			t.Error(err)
		}
	}
	f.cloud.FailNext(sim.OpCreateFleet, 1, domain.ErrInvalidRequest)
	f.queueJobs(small, 100, 1)
	f.serve()
	if j := f.Job(100); j.Status != domain.JobCompleted {
		t.Fatalf("job %s (%s), want it completed as cancelled", j.Status, j.Reason)
	}
	if counter(t, f.p.metrics.jobs, "rejected") != 0 || counter(t, f.p.metrics.jobs, "dropped") != 1 {
		t.Fatal("a job cancelled meanwhile must count as dropped")
	}
	f.wantNothingLeft()
}

// logLine returns the first line of log that contains msg.
func logLine(log, msg string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, msg) {
			return line
		}
	}
	return ""
}

// A job readmitted after a rejection and refused by the cloud again is
// counted apart from new rejections: an alert on rejections would count
// one job at each readmission otherwise.
func TestAReadmittedJobRejectedAgainIsCountedApart(t *testing.T) {
	f := newFixture(t, withImages(map[string]string{}))
	spec := small
	spec.Image = "ubuntu-99.04"
	jobs := f.queueJobs(spec, 100, 1)
	if _, err := f.Store.TransitionJob(f.Ctx, jobs[0].ID, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) { j.Readmissions = 1 }); err != nil {
		t.Fatal(err)
	}
	f.serve()
	if j := f.Job(100); j.Status != domain.JobRejected {
		t.Fatalf("job 100 %s, want rejected", j.Status)
	}
	if again, first := counter(t, f.p.metrics.jobs, "rejected_again"), counter(t, f.p.metrics.jobs, "rejected"); again != 1 || first != 0 {
		t.Fatalf("counted %v rejected again and %v rejected, want 1 and 0", again, first)
	}
}
