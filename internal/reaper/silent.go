package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// silentLookupEvery is how long GitHub's answer about the job of a silent
// busy instance holds before it is asked again: GitHub takes minutes to
// fail a job whose runner it lost, and asking every cycle would spend the
// rate limit on jobs that are most likely fine.
const silentLookupEvery = 3 * time.Minute

// silentPerCycle bounds the GitHub calls a cycle spends on the jobs of
// silent busy instances: a network cut silences every agent at once, and
// each job is then asked about in turn. With the stranded, waiting and
// rejected jobs' shares, a cycle looks up strandedPerCycle +
// waitingPerCycle + silentPerCycle + rejectedPerCycle jobs at most:
// 20 + 10 + 10 + 20, 60 calls. The interrupted
// jobs waiting for their re-run come on top, with no bound of their own:
// one call each a cycle (rerunInterrupted) until it is re-run or settled.
const silentPerCycle = 10

// spared is what the reaper remembers of a silent busy instance it keeps:
// when GitHub was last asked about its job (zero: not yet). Being
// remembered means its keeping was logged already.
type spared struct {
	asked time.Time
}

// silent judges the instances whose agent stopped talking. One that is not
// running a job that started is terminated: the machine died, or the agent
// did, and a job it had not started goes back to its queue in the same
// change. One whose job started is not terminated for its silence alone:
// its agent keeps its job going without the control plane, and silence may
// only mean that the network between them is cut (a load balancer, a
// security group, DNS, NAT), which would fail on GitHub a job that was
// running well and that GitHub does not run again. It is terminated when
// something else says the job cannot be running there: the cloud lists its
// machine not running, or not at all; the store has its job over, or has
// no record of it; or GitHub says the job completed, or no longer has it.
// Failing all of these, a dead machine the cloud still lists running is
// found when GitHub fails its job for the runner it lost, and, should
// GitHub not answer, ended at its running deadline. machines is the
// cycle's cloud listing, nil when the listing failed.
//
// Silence counts from the first cycle at the latest, and from the end of
// the agents' longest backoff after it (AgentAllowance): after an
// outage of the control plane every agent has been unheard for as long,
// each tries again at the end of its backoff, and machines must not be
// killed for it before their agents had a chance to come back.
func (r *Reconciler) silent(ctx context.Context, rows []domain.Instance, machines map[string]domain.CloudInstance) (marked, kept int, err error) {
	now := r.Clock.Now()
	since := r.heard.look(now, max(r.SilentAfter/2, 2*r.Interval))
	var errs []error
	var busy []domain.Instance
	for _, in := range rows {
		if !agentExpected(in.State) {
			continue
		}
		heard := lastHeard(in)
		if now.Sub(heard) < r.SilentAfter || now.Sub(since) < AgentAllowance(r.SilentAfter) {
			continue
		}
		if runsStartedJob(in) {
			busy = append(busy, in)
			continue
		}
		ok, err := r.retireSilent(ctx, in, silenceReason(in, ""), now)
		errs = append(errs, err)
		if ok {
			marked++
			r.Log.Warn("instance's agent is silent; terminating it", "instance", in.ID, "state", in.State, "since", heard)
		}
	}
	m, k, err := r.silentBusy(ctx, rows, busy, machines, now)
	return marked + m, k, errors.Join(append(errs, err)...)
}

// silentBusy judges the silent instances whose job started (see silent).
// It reports how many it marked terminating, and how many it began to keep.
func (r *Reconciler) silentBusy(ctx context.Context, rows, busy []domain.Instance, machines map[string]domain.CloudInstance, now time.Time) (marked, kept int, err error) {
	r.forgetSpared(rows, busy)
	var errs []error
	var ask []askAbout
	for _, in := range busy {
		why := machineNotRunning(in, machines, now, r.GoneGrace)
		if why == "" {
			j, known, over, err := r.jobOver(ctx, in)
			errs = append(errs, err)
			switch {
			case err == nil && known && over == "":
				ask = append(ask, askAbout{in: in, job: j})
				continue
			case over == "":
				if r.keep(in, "") {
					kept++
				}
				continue
			}
			why = over
		}
		ok, err := r.endSilent(ctx, in, why, now)
		errs = append(errs, err)
		if ok {
			marked++
		}
	}
	unasked := ask
	if r.GitHub != nil {
		ask, unasked = r.dueLookups(ask, now)
	} else {
		ask = nil
	}
	for _, a := range unasked {
		if r.keep(a.in, a.job.Repo) {
			kept++
		}
	}
	for _, a := range ask {
		why := r.askGitHub(ctx, a)
		if why == "" {
			if r.keep(a.in, a.job.Repo) {
				kept++
			}
			r.spared[a.in.ID] = spared{asked: now}
			continue
		}
		ok, err := r.endSilent(ctx, a.in, why, now)
		errs = append(errs, err)
		if ok {
			marked++
		}
	}
	return marked, kept, errors.Join(errs...)
}

// askAbout is a silent busy instance whose job GitHub may be asked about.
type askAbout struct {
	in  domain.Instance
	job domain.Job
}

// dueLookups splits ask into the instances whose job GitHub is asked about
// this cycle (at most silentPerCycle of those not asked about within
// silentLookupEvery, those asked least lately first, then the longest
// silent) and the others.
func (r *Reconciler) dueLookups(ask []askAbout, now time.Time) (due, rest []askAbout) {
	for _, a := range ask {
		if now.Sub(r.spared[a.in.ID].asked) >= silentLookupEvery {
			due = append(due, a)
		} else {
			rest = append(rest, a)
		}
	}
	slices.SortStableFunc(due, func(a, b askAbout) int {
		return cmp.Or(r.spared[a.in.ID].asked.Compare(r.spared[b.in.ID].asked), lastHeard(a.in).Compare(lastHeard(b.in)), cmp.Compare(a.in.ID, b.in.ID))
	})
	n := min(len(due), silentPerCycle)
	return due[:n], append(rest, due[n:]...)
}

// askGitHub asks GitHub about the job of a silent busy instance and says
// why the instance is to end, "" when GitHub has the job still going or
// gave no answer.
func (r *Reconciler) askGitHub(ctx context.Context, a askAbout) string {
	g, err := r.GitHub.GetJob(ctx, a.job.Repo, a.job.ID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return "GitHub no longer has its job"
	case err != nil:
		r.Log.Warn("could not ask GitHub about the job of an instance whose agent is silent; keeping it, asking again later",
			"instance", a.in.ID, "job", a.job.ID, "repo", a.job.Repo, "err", err)
		return ""
	case g.Status == githubCompleted:
		return fmt.Sprintf("GitHub reports its job completed (%s)", cmp.Or(g.Conclusion, "no conclusion"))
	}
	return ""
}

// jobOver reads the job of a busy instance: known says whether it is one
// GitHub can be asked about, over why it cannot be running ("" when the
// store has it open). The store keeps every job that is not over, so a job
// it has no record of ended long ago.
func (r *Reconciler) jobOver(ctx context.Context, in domain.Instance) (j domain.Job, known bool, over string, err error) {
	id, err := domain.ParseJobKey(in.Job)
	if err != nil {
		return domain.Job{}, false, "", nil // a job bullpen does not know: the cloud and the deadline decide
	}
	j, err = r.Store.GetJob(ctx, id)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return domain.Job{}, false, "its job is not recorded", nil
	case err != nil:
		return domain.Job{}, false, "", fmt.Errorf("read the job of silent instance %s: %w", in.ID, err)
	case j.Status.Final():
		return j, true, fmt.Sprintf("its job is %s", j.Status), nil
	}
	return j, true, "", nil
}

// machineNotRunning says why the cloud's listing shows that in's machine
// cannot be running its job, "" when it lists it running or when the
// listing failed. A machine not listed counts only once the row is older
// than grace, as the gone rule has it: listings are eventually consistent.
func machineNotRunning(in domain.Instance, machines map[string]domain.CloudInstance, now time.Time, grace time.Duration) string {
	if machines == nil || in.CloudID == "" {
		return ""
	}
	m, ok := machines[in.CloudID]
	switch {
	case !ok && now.Sub(in.CreatedAt) >= grace:
		return "the cloud no longer lists its machine"
	case ok && m.State != domain.CloudRunning:
		return fmt.Sprintf("its machine is %s", m.State)
	}
	return ""
}

// keep notes that silent busy instance in is kept, logging it the first
// time. It reports whether that was the first time.
func (r *Reconciler) keep(in domain.Instance, repo string) bool {
	if _, ok := r.spared[in.ID]; ok {
		return false
	}
	r.spared[in.ID] = spared{}
	attrs := []any{"instance", in.ID, "job", in.Job, "since", lastHeard(in), "deadline", in.Deadline}
	if repo != "" {
		attrs = append(attrs, "repo", repo)
	}
	r.Log.Warn("agent silent, its job still runs; kept", attrs...)
	return true
}

// forgetSpared keeps in r.spared only the instances still silent and busy,
// noting those whose agent was heard again.
func (r *Reconciler) forgetSpared(rows, busy []domain.Instance) {
	still := make(map[string]bool, len(busy))
	for _, in := range busy {
		still[in.ID] = true
	}
	for _, in := range rows {
		if _, ok := r.spared[in.ID]; ok && !still[in.ID] && runsStartedJob(in) {
			r.Log.Info("agent of a kept instance heard again", "instance", in.ID, "job", in.Job, "heard", lastHeard(in))
		}
	}
	keep := make(map[string]spared, len(busy))
	for id := range still {
		if s, ok := r.spared[id]; ok {
			keep[id] = s
		}
	}
	r.spared = keep
}

// endSilent terminates a silent busy instance for why, logging it.
func (r *Reconciler) endSilent(ctx context.Context, in domain.Instance, why string, now time.Time) (bool, error) {
	ok, err := r.retireSilent(ctx, in, silenceReason(in, why), now)
	if ok {
		r.Log.Warn("instance's agent is silent and its job cannot be running there; terminating it",
			"instance", in.ID, "job", in.Job, "since", lastHeard(in), "why", why)
	}
	return ok, err
}

// retireSilent marks a silent instance terminating; a job it had not
// started goes back to its queue in the same change. ok is false when the
// row changed meanwhile: the next cycle looks again.
func (r *Reconciler) retireSilent(ctx context.Context, in domain.Instance, why string, now time.Time) (bool, error) {
	_, ok, err := jobs.Retire(ctx, r.Store, r.Queue, in, domain.StateTerminating, why, now.Add(r.TerminatingAllowance))
	if err != nil {
		err = fmt.Errorf("terminate silent %s: %w", in.ID, err)
	}
	return ok, err
}

// silenceReason is the reason recorded on a silent instance terminated,
// with what else said it had to end, when anything did.
func silenceReason(in domain.Instance, also string) string {
	why := fmt.Sprintf("agent silent since %s", lastHeard(in).UTC().Format(time.RFC3339))
	if also != "" {
		why += "; " + also
	}
	return why
}

// lastHeard is when in's agent was last heard from: its last heartbeat or
// state change.
func lastHeard(in domain.Instance) time.Time {
	if in.Heartbeat.After(in.StateSince) {
		return in.Heartbeat
	}
	return in.StateSince
}

// runsStartedJob reports whether in is running a job whose steps began:
// its agent then keeps going without the control plane.
func runsStartedJob(in domain.Instance) bool {
	return in.State == domain.StateRunning && in.JobStarted
}
