package provision

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// A runner GitHub refuses (a wrong runner group, an App that lost a
// permission, labels it will not take) costs no machine: the runner is
// registered before the launch. The job backs off as DESIGN says, doubling
// to five minutes, and is logged as an error from its third attempt; each
// attempt launched and terminated a machine, every minute.
func TestARunnerGitHubRefusesLaunchesNoMachineAndBacksOff(t *testing.T) {
	for _, refusal := range []error{
		&rest.APIError{Op: "register runner", Status: http.StatusUnauthorized},
		&rest.APIError{Op: "register runner", Status: http.StatusForbidden},
		fmt.Errorf("runner group 7: %w", domain.ErrNotFound),
		fmt.Errorf("labels: %w", domain.ErrInvalidRequest),
		domain.ErrUnauthorized,
	} {
		t.Run(refusal.Error(), func(t *testing.T) {
			var log testlog.Buffer
			f := newFixture(t, withLog(&log))
			f.gh.FailNext(ghsim.OpRegisterRunner, 100, refusal)
			f.queueJobs(small, 100, 1)
			for attempt := 1; attempt <= 9; attempt++ {
				f.serve()
				if n := len(f.cloud.Instances()); n != 0 {
					t.Fatalf("attempt %d: %d machines launched for a job whose runner GitHub refuses", attempt, n)
				}
				j := f.Job(100)
				if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != attempt || !strings.Contains(j.Reason, "register runner") {
					t.Fatalf("attempt %d: job %s on %q, attempts %d, reason %q", attempt, j.Status, j.InstanceID, j.Attempts, j.Reason)
				}
				delay := jobs.RetryDelay(attempt)
				f.Clock.Advance(delay - time.Millisecond)
				if st := f.Stats(domain.QueueLaunch); st.Visible != 0 || st.Delayed != 1 {
					t.Fatalf("attempt %d: launch queue %+v before its %s backoff", attempt, st, delay)
				}
				f.Clock.Advance(time.Millisecond)
			}
			if jobs.RetryDelay(9) != jobs.MaxRequeueDelay {
				t.Fatalf("the last backoff %s does not reach the cap", jobs.RetryDelay(9))
			}
			var levels []string
			for line := range strings.Lines(log.String()) {
				if strings.Contains(line, "GitHub refuses the job's runner") {
					levels = append(levels, strings.Fields(line)[1])
				}
			}
			if len(levels) != 9 || levels[1] != "level=WARN" || levels[2] != "level=ERROR" || levels[8] != "level=ERROR" {
				t.Fatalf("refusals logged at %v, want WARN twice, then ERROR", levels)
			}
		})
	}
}

// A registration GitHub fails for a while (a 502, the network) costs no
// machine either: nothing is launched and terminated for it, and the job
// is served once GitHub answers.
func TestATransientRegistrationFailureTerminatesNothing(t *testing.T) {
	for _, outage := range []error{
		&rest.APIError{Op: "register runner", Status: http.StatusBadGateway},
		errors.New("connection reset by peer"),
	} {
		t.Run(outage.Error(), func(t *testing.T) {
			f := newFixture(t)
			f.gh.FailNext(ghsim.OpRegisterRunner, 1, outage)
			f.queueJobs(small, 100, 1)
			f.serve()
			f.wantRequeued(100, outage.Error())
			if n := len(f.cloud.Instances()); n != 0 {
				t.Fatalf("%d machines launched for a runner GitHub could not register", n)
			}
			f.Clock.Advance(jobs.RequeueDelay)
			f.serve()
			j := f.Job(100)
			in := f.wantState(j.InstanceID, domain.StateRunning)
			f.wantJob(100, domain.JobAssigned, domain.ViaCold, in.ID)
			if n := len(f.cloud.Instances()); n != 1 {
				t.Fatalf("%d machines for one job, want 1", n)
			}
			if rs := f.runners(); len(rs) != 1 || rs[0].Name != j.RunnerName {
				t.Fatalf("runners %+v, want the job's alone", rs)
			}
		})
	}
}
