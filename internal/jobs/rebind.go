package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// Rebind records that GitHub gave job id to the runner on instance y. That
// is not always the instance bullpen assigned the job to: a just-in-time
// runner takes any queued job whose labels it carries, so jobs with the same
// labels (two dependabot jobs, two jobs of one run) can swap runners. From
// then on y is bound to the job and the job to y, so that the job's end
// releases the instance that ran it.
//
// The job y had been assigned (the displaced job) still needs a runner. If
// the job's previous instance x still holds a runner waiting for it, and
// that runner's labels cover the displaced job's, x is bound to the
// displaced job: GitHub will most likely give it to x's runner, and a report
// that says otherwise is rebound in turn. Otherwise no runner of bullpen's
// can take the displaced job and it is requeued for a new one.
func Rebind(ctx context.Context, st domain.Store, q domain.Queue, id int64, y string) error {
	j, err := st.GetJob(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil || j.Status.Final() {
		return err
	}
	displaced, bound, err := bindInstance(ctx, st, j, y)
	if err != nil || !bound {
		return err
	}
	_, err = update(ctx, st, id, func(cur domain.Job) (func(*domain.Job), bool) {
		return func(c *domain.Job) { c.InstanceID = y }, cur.InstanceID != y && !cur.Status.Final()
	})
	if err != nil {
		return fmt.Errorf("bind job %d to %s: %w", id, y, err)
	}
	if displaced == "" || displaced == j.Key() {
		return nil
	}
	return placeDisplaced(ctx, st, q, j, displaced, y)
}

// bindInstance binds y to job j, returning the job it was bound to before.
// bound is false when y serves no job of bullpen's (nothing to follow).
func bindInstance(ctx context.Context, st domain.Store, j domain.Job, y string) (displaced string, bound bool, err error) {
	key := j.Key()
	for range retries {
		in, err := st.GetInstance(ctx, y)
		if errors.Is(err, domain.ErrNotFound) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		if !ServesJob(in.State) {
			return "", false, nil // not running a job of ours
		}
		if in.Job == key {
			return "", true, nil
		}
		_, err = st.Transition(ctx, y, domain.GuardOf(in), func(x *domain.Instance) { x.Job, x.JobStarted = key, false })
		if err == nil {
			return in.Job, true, nil
		}
		if !errors.Is(err, domain.ErrConflict) {
			return "", false, fmt.Errorf("bind %s to job %d: %w", y, j.ID, err)
		}
	}
	return "", false, fmt.Errorf("bind %s to job %d: still changing after %d attempts", y, j.ID, retries)
}

// placeDisplaced finds the displaced job a runner: that of taken's previous
// instance if it fits, else a new one through its queue.
func placeDisplaced(ctx context.Context, st domain.Store, q domain.Queue, taken domain.Job, displacedKey, y string) error {
	did, err := domain.ParseJobKey(displacedKey)
	if err != nil {
		return nil // not a job id bullpen wrote; nothing to place
	}
	d, err := st.GetJob(ctx, did)
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %d displaced from %s: %w", did, y, err)
	}
	if d.Status != domain.JobAssigned || d.InstanceID != y {
		return nil // it has moved on
	}
	x := taken.InstanceID
	if x != "" && x != y && labelsCover(taken.Labels, d.Labels) {
		moved, err := handOver(ctx, st, x, taken.Key(), d)
		if err != nil || moved {
			return err
		}
	}
	return Requeue(ctx, st, q, did, y, fmt.Sprintf("its runner took job %d", taken.ID))
}

// handOver binds instance x, still waiting for job from with a runner
// registered for it, to job d instead. moved is false when x has moved on.
func handOver(ctx context.Context, st domain.Store, x, from string, d domain.Job) (moved bool, err error) {
	in, err := st.GetInstance(ctx, x)
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if in.Job != from || in.JobStarted || !ServesJob(in.State) {
		return false, nil
	}
	_, err = st.Transition(ctx, x, domain.GuardOf(in), func(i *domain.Instance) { i.Job = d.Key() })
	if errors.Is(err, domain.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("hand %s to job %d: %w", x, d.ID, err)
	}
	_, err = update(ctx, st, d.ID, func(cur domain.Job) (func(*domain.Job), bool) {
		return func(c *domain.Job) { c.InstanceID = x }, cur.Status == domain.JobAssigned && cur.InstanceID != x
	})
	if err != nil {
		return true, fmt.Errorf("bind job %d to %s: %w", d.ID, x, err)
	}
	return true, nil
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

// ParseRunnerName reads a runner name as the dispatcher and the provisioner
// make them, "<instance id>-<job id>" (instance ids start "bp-").
func ParseRunnerName(name string) (instanceID string, jobID int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= len("bp-") || i == len(name)-1 || !strings.HasPrefix(name, "bp-") {
		return "", 0, false
	}
	id, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return "", 0, false
	}
	return name[:i], id, true
}
