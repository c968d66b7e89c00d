package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// ServesJob reports whether an instance in state s can be running a job for
// which it registered a runner.
func ServesJob(s domain.State) bool {
	switch s {
	case domain.StateBooting, domain.StateClaimed, domain.StateRunning:
		return true
	}
	return false
}

// UnboundWait is how long an instance whose runner's job another runner
// took may keep its runner waiting, unbound, for GitHub to hand it another
// job with the same labels, before the reaper terminates it.
const UnboundWait = 5 * time.Minute

// ForeignJobWait is how long an instance whose runner took a job bullpen
// does not know (another stack's, whose labels the runner carries) is
// left unbound before the reaper terminates it: that job runs on it, and
// cutting it short fails it. It is GitHub's default job timeout
// (timeout-minutes: 360). GitHub's report of that job's end retires the
// instance sooner (FollowRunnerEnded).
const ForeignJobWait = 6 * time.Hour

// rebindAttempts bounds how often FollowRunner reads and decides again when a
// concurrent writer changed one of the rows it read.
const rebindAttempts = 8

// FollowRunner records GitHub's report that the runner called runnerName
// (a name bullpen gave a runner: domain.RunnerName, naming its instance,
// the taker) ran job id. That is not always the instance bullpen assigned the job to: a
// just-in-time runner takes any queued job whose labels it carries, so jobs
// with the same labels (two dependabot jobs, two jobs of one run) can swap
// runners. Only GitHub's own reports (a webhook, the jobs API) are followed:
// an agent cannot know which job its runner took, so it cannot move one.
//
// Every row it changes is changed in one atomic step (domain.Change): the
// job is bound to taker; the job taker held before (the displaced job) is
// handed to the instance the reported job leaves (its holder) when that
// holder's runner could take it, which makes a swap of two runners that
// could each take both jobs; otherwise the displaced job goes back to its
// queue and the holder is unbound, its runner left to wait UnboundWait for
// another job.
//
// The runner took the reported job, so it will never run the displaced one:
// that job goes back to its queue even when the reported job is over
// (GitHub's completed came before anything else of it) or is not one
// bullpen knows (another stack's, whose labels taker's runner carries).
// Neither can be bound to taker, which is unbound: it serves no job of
// bullpen's. The displaced job goes back then even when it is running: its
// agent reported that its runner started a job, not which one, and GitHub
// says which (but see below). With no displaced job,
// a job that is over, an instance that no longer serves a job and rows
// bullpen does not know are left as they are.
//
// A report about a runner the instance no longer holds (a late delivery
// about its previous job) is not followed. It reports whether anything
// was changed.
//
// A running job bound to the runner's instance stays there when GitHub
// itself reported it on that runner, as the name it recorded for the job
// shows: the report contradicts GitHub's own and is not followed. The
// name shows it only when it is not the one registered for the job (a
// name bullpen registers carries its job's id); an agent's report never
// records one.
func FollowRunner(ctx context.Context, st Store, q domain.Queue, id int64, runnerName string, now time.Time) (bool, error) {
	taker, _, ok := domain.ParseRunnerName(runnerName)
	if !ok {
		return false, nil
	}
	return follow(ctx, st, q, id, taker, runnerName, false, now)
}

// FollowRunnerEnded is FollowRunner for GitHub's report that job id ended
// on the runner called runnerName. A just-in-time runner serves one job:
// one that ended a job its instance cannot be bound to (over, or not
// bullpen's) is spent, and the instance is retired (terminated) at once,
// where its runner would never take another job however long it waited.
func FollowRunnerEnded(ctx context.Context, st Store, q domain.Queue, id int64, runnerName string, now time.Time) (bool, error) {
	taker, _, ok := domain.ParseRunnerName(runnerName)
	if !ok {
		return false, nil
	}
	return follow(ctx, st, q, id, taker, runnerName, true, now)
}

// follow is FollowRunner for the instance taker, with the name of the runner reported, and
// whether the report is of the job's end.
func follow(ctx context.Context, st Store, q domain.Queue, id int64, taker, runnerName string, ended bool, now time.Time) (bool, error) {
	for range rebindAttempts {
		rows, ok, err := readRebind(ctx, st, id, taker, runnerName, ended)
		if err != nil || !ok {
			return false, err
		}
		c := rows.plan(now)
		if c.Empty() {
			return false, nil
		}
		done, err := st.Commit(ctx, c)
		if errors.Is(err, domain.ErrConflict) {
			continue // a row moved on: read and decide again
		}
		if err != nil {
			return false, fmt.Errorf("bind job %d to %s: %w", id, taker, err)
		}
		return true, sendRequeued(ctx, st, q, done.Jobs)
	}
	return false, fmt.Errorf("bind job %d to %s: still changing after %d attempts", id, taker, rebindAttempts)
}

// rebindRows are the rows a rebind reads: the reported job, its taker, its
// previous holder and the job the taker held, with what their runners carry.
type rebindRows struct {
	reported int64
	job      domain.Job
	// unbindable: the reported job is over, or the store has none (job is
	// zero then); taker cannot be bound to it.
	unbindable bool
	// spent: the report is of the end of a job taker cannot be bound to,
	// and taker serves no other job of bullpen's: its runner is done.
	spent     bool
	taker     domain.Instance
	holder    *domain.Instance // the instance still bound to job, when another
	displaced *domain.Job      // the job bound to taker that its runner will not run, when another
	// holderTakes: the holder's runner carries the displaced job's labels
	// and the taker's runner the reported job's: each could run both.
	holderTakes bool
}

// readRebind reads what FollowRunner decides on; ok is false when there is
// nothing to follow.
func readRebind(ctx context.Context, st Store, id int64, taker, runnerName string, ended bool) (rebindRows, bool, error) {
	r := rebindRows{reported: id}
	j, err := st.GetJob(ctx, id)
	unknown := errors.Is(err, domain.ErrNotFound)
	if err != nil && !unknown {
		return r, false, err
	}
	over := !unknown && j.Status.Final()
	if over && j.InstanceID != "" {
		return r, false, nil // it ended on an instance, released with it: a late report
	}
	r.unbindable = unknown || over
	in, err := st.GetInstance(ctx, taker)
	if errors.Is(err, domain.ErrNotFound) {
		return r, false, nil
	}
	if err != nil || !ServesJob(in.State) {
		return r, false, err // not running a job of ours
	}
	if runnerName != "" && in.RunnerName != "" && !strings.EqualFold(runnerName, in.RunnerName) {
		return r, false, nil // about a runner it held before
	}
	r.job, r.taker = j, in
	if r.unbindable {
		// Nothing of bullpen's waits on the report but the job taker's
		// runner was started for, and taker itself once that runner is done.
		d, err := jobOf(ctx, st, in, domain.JobAssigned, domain.JobRunning)
		if err != nil {
			return r, false, err
		}
		if d != nil && reportedOn(*d, runnerName) {
			return r, false, nil
		}
		r.displaced = d
		// A runner it no longer holds (released, or a new job's not named
		// yet) proves nothing spent.
		holds := in.RunnerName != "" && strings.EqualFold(in.RunnerName, runnerName)
		r.spent = ended && holds && (d != nil || in.Job == "")
		return r, d != nil || r.spent, nil
	}
	if d, err := boundJob(ctx, st, in); err != nil {
		return r, false, err
	} else if d != nil && d.ID != id {
		r.displaced = d
	}
	if j.InstanceID != "" && j.InstanceID != taker {
		h, err := st.GetInstance(ctx, j.InstanceID)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return r, false, err
		}
		if err == nil && h.Job == j.Key() && ServesJob(h.State) {
			r.holder = &h
		}
	}
	if r.holder != nil && r.displaced != nil {
		if r.holderTakes, err = runnerTakes(ctx, st, *r.holder, r.displaced.Labels); err == nil {
			var takerTakes bool
			takerTakes, err = runnerTakes(ctx, st, in, j.Labels)
			r.holderTakes = r.holderTakes && takerTakes
		}
		if err != nil {
			return r, false, err
		}
	}
	return r, true, nil
}

// reportedOn reports whether GitHub's word that job j runs on the runner
// called runnerName is on record: a name bullpen registers for a job
// carries that job's id, so j's recorded name is GitHub's when it names
// that runner and another job.
func reportedOn(j domain.Job, runnerName string) bool {
	_, registeredFor, ok := domain.ParseRunnerName(j.RunnerName)
	return ok && registeredFor != j.ID && strings.EqualFold(j.RunnerName, runnerName)
}

// boundJob returns the unstarted job assigned to in, if any.
func boundJob(ctx context.Context, st Store, in domain.Instance) (*domain.Job, error) {
	return jobOf(ctx, st, in, domain.JobAssigned)
}

// jobOf returns the job in is bound to when the job names in too and is
// in one of statuses; nil otherwise.
func jobOf(ctx context.Context, st Store, in domain.Instance, statuses ...domain.JobStatus) (*domain.Job, error) {
	id, err := domain.ParseJobKey(in.Job)
	if err != nil {
		return nil, nil // no job, or not one bullpen wrote
	}
	j, err := st.GetJob(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if j.InstanceID != in.ID || !slices.Contains(statuses, j.Status) {
		return nil, nil
	}
	return &j, nil
}

// runnerTakes reports whether the runner registered on in could take a job
// asking for want: its labels are those of the job it was registered for.
func runnerTakes(ctx context.Context, st Store, in domain.Instance, want []string) (bool, error) {
	_, id, ok := domain.ParseRunnerName(in.RunnerName)
	if !ok {
		return false, nil
	}
	j, err := st.GetJob(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return labelsCover(j.Labels, want), nil
}

// plan is the change that follows the report, empty when the rows already
// say what it says.
func (r rebindRows) plan(now time.Time) domain.Change {
	var c domain.Change
	if r.unbindable {
		switch {
		case r.spent:
			c.Instances = append(c.Instances, retiring.Release(r.taker, r.spentReason(), now))
		case r.job.ID == 0:
			c.Instances = append(c.Instances, verbs.UnbindForeign(r.taker, now.Add(ForeignJobWait)))
		default: // the reported job is over: the runner is done with it
			c.Instances = append(c.Instances, verbs.Unbind(r.taker, now.Add(UnboundWait)))
		}
		if r.displaced == nil {
			return c
		}
		return r.placeDisplaced(c, now)
	}
	key, taker := r.job.Key(), r.taker.ID
	if r.taker.Job != key {
		c.Instances = append(c.Instances, verbs.Bind(r.taker, key))
	}
	if r.job.InstanceID != taker {
		c.Jobs = append(c.Jobs, verbs.BindJob(r.job, taker, now))
	}
	if r.displaced != nil {
		c = r.placeDisplaced(c, now)
	} else if r.holder != nil {
		c.Instances = append(c.Instances, verbs.Unbind(*r.holder, now.Add(UnboundWait)))
	}
	return c
}

// placeDisplaced hands the displaced job to the holder when each runner
// could take both jobs, else sends it back to its queue and unbinds the
// holder.
func (r rebindRows) placeDisplaced(c domain.Change, now time.Time) domain.Change {
	d := *r.displaced
	if r.holder != nil && r.holderTakes {
		c.Instances = append(c.Instances, verbs.Bind(*r.holder, d.Key()))
		c.Jobs = append(c.Jobs, verbs.BindJob(d, r.holder.ID, now))
		return c
	}
	if r.holder != nil {
		c.Instances = append(c.Instances, verbs.Unbind(*r.holder, now.Add(UnboundWait)))
	}
	requeue := verbs.RequeueJob
	if d.Status == domain.JobRunning {
		requeue = verbs.RequeueNotRun // its agent saw the runner start the reported job
	}
	c.Jobs = append(c.Jobs, requeue(d, fmt.Sprintf("its runner took job %d", r.reported)))
	return c
}

// retiring ends the instance of a spent runner. The deadline of the state
// it enters only bounds the retries of the terminate call.
var retiring = domain.NewLifecycle(domain.Deadlines{})

// spentReason says why a spent runner's instance is retired.
func (r rebindRows) spentReason() string {
	if r.job.ID == 0 {
		return fmt.Sprintf("its runner ran job %d, not this stack's, to its end: a runner serves one job", r.reported)
	}
	return fmt.Sprintf("its runner ran job %d to its end: a runner serves one job", r.reported)
}

// labelsCover reports whether a runner registered with labels have can take
// a job asking for want (GitHub matches labels case-insensitively).
func labelsCover(have, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, w) }) {
			return false
		}
	}
	return true
}
