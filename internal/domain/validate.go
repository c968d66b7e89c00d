package domain

import (
	"errors"
	"fmt"
	"time"
)

// Validate refuses an instance a store could not make sense of: no id, an
// unknown state, or a time outside the years every store can hold.
func (i Instance) Validate() error {
	if i.ID == "" {
		return errors.New("instance has no id")
	}
	if !i.State.Valid() {
		return fmt.Errorf("instance %s: unknown state %q", i.ID, i.State)
	}
	return errors.Join(
		CheckTime("deadline", i.Deadline), CheckTime("created_at", i.CreatedAt),
		CheckTime("updated_at", i.UpdatedAt), CheckTime("state_since", i.StateSince),
		CheckTime("running_since", i.RunningSince), CheckTime("heartbeat", i.Heartbeat))
}

// Validate refuses a job a store could not make sense of. Its messages
// name fields, never their values: a job carries a credential.
func (j Job) Validate() error {
	if j.ID <= 0 {
		return fmt.Errorf("job id %d: must be positive", j.ID)
	}
	if !j.Status.Valid() {
		return fmt.Errorf("job %d: unknown status %q", j.ID, j.Status)
	}
	err := errors.Join(
		CheckTime("created_at", j.CreatedAt), CheckTime("updated_at", j.UpdatedAt),
		CheckTime("queued_at", j.QueuedAt), CheckTime("assigned_at", j.AssignedAt),
		CheckTime("started_at", j.StartedAt), CheckTime("completed_at", j.CompletedAt))
	if err != nil {
		return fmt.Errorf("job %d: %w", j.ID, err)
	}
	return nil
}

// CheckTime refuses a time outside years 1 to 9999 (RFC 3339 and both
// stores' encodings); the zero time means "none" and passes.
func CheckTime(field string, t time.Time) error {
	if y := t.UTC().Year(); !t.IsZero() && (y < 1 || y > 9999) {
		return fmt.Errorf("%s %v is outside years 1..9999", field, t)
	}
	return nil
}
