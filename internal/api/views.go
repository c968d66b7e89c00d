package api

import (
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
)

// JobView is a job as the API shows it. Every field is always present (a
// time not reached yet is null), so clients see one shape whatever the
// job's status.
type JobView struct {
	ID         int64    `json:"id"`
	RunID      int64    `json:"run_id"`
	Repo       string   `json:"repo"`
	Name       string   `json:"name"`
	Labels     []string `json:"labels"`
	Status     string   `json:"status"`
	Route      string   `json:"route"`
	Via        string   `json:"via"`
	Pool       string   `json:"pool"`
	Runner     string   `json:"runner"`
	InstanceID string   `json:"instance_id"`
	RunnerName string   `json:"runner_name"`
	Reason     string   `json:"reason"`
	Conclusion string   `json:"conclusion"`
	// Interrupted: its spot machine was taken back after it started; Rerun:
	// GitHub was asked to re-run it.
	Interrupted bool `json:"interrupted,omitempty"`
	Rerun       bool `json:"rerun,omitempty"`
	Attempts    int  `json:"attempts"`
	// Readmissions: times a rejection was taken back, the configuration in
	// force routing the job since.
	Readmissions int        `json:"readmissions,omitempty"`
	QueuedAt     *time.Time `json:"queued_at"`
	AssignedAt   *time.Time `json:"assigned_at"`
	StartedAt    *time.Time `json:"started_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	CreatedAt    *time.Time `json:"created_at"`
	UpdatedAt    *time.Time `json:"updated_at"`
}

// ViewJob renders j without its runner configuration.
func ViewJob(j domain.Job) JobView {
	labels := j.Labels
	if labels == nil {
		labels = []string{}
	}
	return JobView{
		ID: j.ID, RunID: j.RunID, Repo: j.Repo, Name: j.Name, Labels: labels, Status: string(j.Status),
		Route: string(j.Route), Via: string(j.Via), Pool: j.Pool, Runner: j.Runner, InstanceID: j.InstanceID,
		RunnerName: j.RunnerName, Reason: j.Reason, Conclusion: j.Conclusion, Attempts: j.Attempts, Readmissions: j.Readmissions,
		Interrupted: j.Interrupted, Rerun: j.Rerun,
		QueuedAt: ts(j.QueuedAt), AssignedAt: ts(j.AssignedAt), StartedAt: ts(j.StartedAt),
		CompletedAt: ts(j.CompletedAt), CreatedAt: ts(j.CreatedAt), UpdatedAt: ts(j.UpdatedAt),
	}
}

// InstanceView is an instance as the API shows it.
type InstanceView struct {
	ID           string     `json:"id"`
	CloudID      string     `json:"cloud_id,omitempty"`
	Pool         string     `json:"pool,omitempty"`
	Role         string     `json:"role"`
	Runner       string     `json:"runner"`
	State        string     `json:"state"`
	Job          string     `json:"job,omitempty"`
	JobStarted   bool       `json:"job_started"`
	JobsServed   int        `json:"jobs_served"`
	InstanceType string     `json:"instance_type,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	Deadline     *time.Time `json:"deadline,omitempty"`
	Heartbeat    *time.Time `json:"heartbeat,omitempty"`
	CreatedAt    *time.Time `json:"created_at,omitempty"`
	StateSince   *time.Time `json:"state_since,omitempty"`
}

func viewInstance(in domain.Instance) InstanceView {
	return InstanceView{
		ID: in.ID, CloudID: in.CloudID, Pool: in.Pool, Role: string(in.Role), Runner: in.Runner, State: string(in.State),
		Job: in.Job, JobStarted: in.JobStarted, JobsServed: in.JobsServed, InstanceType: in.InstanceType, Reason: in.Reason,
		Deadline: ts(in.Deadline), Heartbeat: ts(in.Heartbeat), CreatedAt: ts(in.CreatedAt), StateSince: ts(in.StateSince),
	}
}

func ts(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// PoolView joins a pool's configuration with the converger's last cycle and
// the pool's instances now. Counts are tallied at each request, so they
// include what the last cycle did (machines it created or stopped), which
// the converger records before acting. Target, Schedule and SpecHash are
// the last cycle's; Target and LastCycle are null until the converger has
// recorded one, so a new pool never reads as being at its target.
type PoolView struct {
	Name        string         `json:"name"`
	Environment string         `json:"environment,omitempty"`
	Runner      string         `json:"runner"`
	Timezone    string         `json:"timezone,omitempty"`
	Schedule    string         `json:"schedule"`
	Target      *domain.Target `json:"target"`
	Counts      map[string]int `json:"counts"`
	SpecHash    string         `json:"spec_hash,omitempty"`
	LastCycle   *time.Time     `json:"last_cycle"`
	LastError   string         `json:"last_error,omitempty"`
	// NextChange is when the schedule next changes the target, to the
	// entry NextSchedule.
	NextChange   *time.Time `json:"next_change,omitempty"`
	NextSchedule string     `json:"next_schedule,omitempty"`
}

// liveCounts renders rebalance.Count under the names the converger records
// them by; every name is present, zero included.
func liveCounts(insts []domain.Instance) map[string]int {
	c := rebalance.Count(insts)
	return map[string]int{"ready_hot": c.ReadyHot, "stopped": c.Stopped, "warming": c.Warming,
		"detached": c.Detached, "other": c.Other, "reusable": c.Reusable}
}
