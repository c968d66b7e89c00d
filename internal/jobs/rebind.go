package jobs

import (
	"context"
	"errors"
	"fmt"
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
// releases the instance that ran it. The job y had been assigned is not
// moved: it waits for the runner that is left, and is rebound in turn when
// GitHub reports which runner took it.
func Rebind(ctx context.Context, st domain.Store, id int64, y string) error {
	j, err := st.GetJob(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil || j.Status.Final() {
		return err
	}
	key, bound := j.Key(), false
	for range retries {
		in, err := st.GetInstance(ctx, y)
		if errors.Is(err, domain.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !ServesJob(in.State) {
			return nil // not running a job of ours
		}
		if in.Job == key {
			bound = true
			break
		}
		_, err = st.Transition(ctx, y, domain.GuardOf(in), func(x *domain.Instance) { x.Job, x.JobStarted = key, false })
		if err == nil {
			bound = true
			break
		}
		if !errors.Is(err, domain.ErrConflict) {
			return fmt.Errorf("bind %s to job %d: %w", y, id, err)
		}
	}
	if !bound {
		return fmt.Errorf("bind %s to job %d: still changing after %d attempts", y, id, retries)
	}
	_, err = update(ctx, st, id, func(cur domain.Job) (func(*domain.Job), bool) {
		return func(c *domain.Job) { c.InstanceID = y }, cur.InstanceID != y && !cur.Status.Final()
	})
	if err != nil {
		return fmt.Errorf("bind job %d to %s: %w", id, y, err)
	}
	return nil
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
