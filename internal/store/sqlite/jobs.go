package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// jobColumns is the column order of every job read and write.
const jobColumns = `id, run_id, run_attempt, repo, name, workflow, labels,
	status, route, via, pool, runner, spec,
	instance_id, launched_on, runner_name, runner_id, reason, conclusion, attempts, readmissions, send_pending, interrupted, rerun, version,
	created_at, updated_at, queued_at, assigned_at, started_at, completed_at`

const (
	insertJob = `INSERT INTO jobs (` + jobColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`
	selectJob = `SELECT ` + jobColumns + ` FROM jobs WHERE id = ?`
	updateJob = `UPDATE jobs SET
		run_id = ?, run_attempt = ?, repo = ?, name = ?, workflow = ?, labels = ?,
		status = ?, route = ?, via = ?, pool = ?, runner = ?, spec = ?,
		instance_id = ?, launched_on = ?, runner_name = ?, runner_id = ?, reason = ?, conclusion = ?,
		attempts = ?, readmissions = ?, send_pending = ?, interrupted = ?, rerun = ?, version = ?,
		created_at = ?, updated_at = ?, queued_at = ?, assigned_at = ?, started_at = ?, completed_at = ?
		WHERE id = ?`
)

// jobArgs returns the values of j in jobColumns order.
func jobArgs(j domain.Job) ([]any, error) {
	labels, err := json.Marshal(j.Labels)
	if err != nil {
		return nil, fmt.Errorf("job %d: labels: %w", j.ID, err)
	}
	spec, err := json.Marshal(j.Spec)
	if err != nil {
		return nil, fmt.Errorf("job %d: spec: %w", j.ID, err)
	}
	return []any{
		j.ID, j.RunID, j.RunAttempt, j.Repo, j.Name, j.Workflow, string(labels),
		string(j.Status), string(j.Route), string(j.Via), j.Pool, j.Runner, string(spec),
		j.InstanceID, j.LaunchedOn, j.RunnerName, j.RunnerID, j.Reason, j.Conclusion, j.Attempts, j.Readmissions, j.SendPending, j.Interrupted, j.Rerun, j.Version,
		formatTime(j.CreatedAt), formatTime(j.UpdatedAt), formatTime(j.QueuedAt),
		formatTime(j.AssignedAt), formatTime(j.StartedAt), formatTime(j.CompletedAt),
	}, nil
}

// scanJob reads one row selected with jobColumns.
func scanJob(row scanner) (domain.Job, error) {
	var j domain.Job
	var labels, status, route, via, spec string
	var times [6]sql.NullString
	err := row.Scan(&j.ID, &j.RunID, &j.RunAttempt, &j.Repo, &j.Name, &j.Workflow, &labels,
		&status, &route, &via, &j.Pool, &j.Runner, &spec,
		&j.InstanceID, &j.LaunchedOn, &j.RunnerName, &j.RunnerID, &j.Reason, &j.Conclusion, &j.Attempts, &j.Readmissions, &j.SendPending, &j.Interrupted, &j.Rerun, &j.Version,
		&times[0], &times[1], &times[2], &times[3], &times[4], &times[5])
	if err != nil {
		return domain.Job{}, err
	}
	j.Status, j.Route, j.Via = domain.JobStatus(status), domain.Route(route), domain.Via(via)
	errs := []error{
		json.Unmarshal([]byte(labels), &j.Labels),
		json.Unmarshal([]byte(spec), &j.Spec),
	}
	for k, dst := range jobTimes(&j) {
		var err error
		*dst, err = parseTime(times[k])
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return domain.Job{}, fmt.Errorf("job %d: %w", j.ID, err)
	}
	return j, nil
}

// jobTimes points at j's times in jobColumns order.
func jobTimes(j *domain.Job) []*time.Time {
	return []*time.Time{&j.CreatedAt, &j.UpdatedAt, &j.QueuedAt, &j.AssignedAt, &j.StartedAt, &j.CompletedAt}
}

// normalizeJobTimes returns j with its times as they read back: in UTC.
func normalizeJobTimes(j domain.Job) domain.Job {
	inUTC(jobTimes(&j)...)
	return j
}

// CreateJobs inserts the jobs whose id is new, in one transaction, and
// reports which it inserted; an existing row (or an earlier job of the same
// batch) keeps its id and is left untouched. An invalid job fails the whole
// call before anything is written.
func (s *Store) CreateJobs(ctx context.Context, jobs []domain.Job) ([]bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("create jobs: %w", err)
	}
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("create jobs: %w", err)
		}
	}
	created := make([]bool, len(jobs))
	if len(jobs) == 0 {
		return created, nil
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := s.txStmt(ctx, tx, insertJob)
		if err != nil {
			return err
		}
		now := s.clk.Now().UTC()
		for k, j := range jobs {
			j.Version, j.CreatedAt, j.UpdatedAt = 1, now, now
			args, err := jobArgs(j)
			if err != nil {
				return err
			}
			res, err := stmt.ExecContext(ctx, args...)
			if err != nil {
				return fmt.Errorf("insert job %d: %w", j.ID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("insert job %d: %w", j.ID, err)
			}
			created[k] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create jobs: %w", err)
	}
	return created, nil
}

// GetJob returns the job with id, or ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	return jobKind.getRow(ctx, s, id)
}

// ListJobs returns the jobs matching f, oldest first by CreatedAt then ID,
// or newest first when f.Newest is set, and only those past f.After when
// it is set.
func (s *Store) ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error) {
	if f.After != nil {
		if err := domain.CheckTime("position", f.After.CreatedAt); err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
	}
	query, args := listJobsQuery(f)
	return jobKind.listRows(ctx, s, query, args)
}

// listJobsQuery builds the SELECT for f: one condition per non-zero field.
func listJobsQuery(f domain.JobFilter) (string, []any) {
	var conds []string
	var args []any
	if f.Pool != "" {
		conds, args = append(conds, "pool = ?"), append(args, f.Pool)
	}
	if f.Instance != "" {
		conds, args = append(conds, "instance_id = ?"), append(args, f.Instance)
	}
	if !f.UpdatedBefore.IsZero() {
		conds, args = append(conds, "updated_at < ?"), append(args, formatTime(f.UpdatedBefore))
	}
	if f.ToRerun {
		conds = append(conds, "interrupted != 0 AND rerun = 0") // as the index jobs_to_rerun says
	}
	if len(f.Statuses) > 0 {
		conds = append(conds, "status IN ("+placeholders(len(f.Statuses))+")")
		for _, st := range f.Statuses {
			args = append(args, string(st))
		}
	}
	if len(f.IDs) > 0 {
		// A JSON array keeps the query text the same for any number of
		// ids, so it is parsed once.
		ids, _ := json.Marshal(f.IDs)
		conds, args = append(conds, "id IN (SELECT value FROM json_each(?))"), append(args, string(ids))
	}
	conds, args = passed(conds, args, f.After, f.Newest)
	return orderedListing(`SELECT `+jobColumns+` FROM jobs`, conds, args, f.Newest, f.Limit)
}

// DeleteJobs removes the completed and rejected jobs last changed before
// before, and reports how many.
func (s *Store) DeleteJobs(ctx context.Context, before time.Time) (int, error) {
	if err := domain.CheckTime("before", before); err != nil {
		return 0, fmt.Errorf("delete jobs: %w", err)
	}
	var n int64
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		const q = `DELETE FROM jobs WHERE status IN (?, ?) AND updated_at < ?`
		res, err := tx.ExecContext(ctx, q, string(domain.JobCompleted), string(domain.JobRejected), formatTime(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete jobs before %v: %w", before, err)
	}
	return int(n), nil
}

// RecordHeartbeat notes the agent of instance id alive at at. It keeps the
// latest heartbeat, so one delivered late does not move it back, and
// leaves the version alone: it is not a transition.
// RecordHeartbeats records many heartbeats in one transaction; ids without
// a row are ignored.
func (s *Store) RecordHeartbeats(ctx context.Context, beats []domain.Heartbeat) error {
	for _, b := range beats {
		if b.At.IsZero() {
			return fmt.Errorf("record heartbeats: %s: zero time", b.ID)
		}
		if err := domain.CheckTime("heartbeat", b.At); err != nil {
			return fmt.Errorf("record heartbeats: %s: %w", b.ID, err)
		}
	}
	if len(beats) == 0 {
		return s.checkOpen()
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := s.txStmt(ctx, tx, updateHeartbeat)
		if err != nil {
			return err
		}
		for _, b := range beats {
			if _, err := stmt.ExecContext(ctx, formatTime(b.At), b.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record %d heartbeats: %w", len(beats), err)
	}
	return nil
}

// updateHeartbeat keeps the latest heartbeat: an older one changes nothing.
const updateHeartbeat = `UPDATE instances SET heartbeat = max(coalesce(heartbeat, ''), ?1) WHERE id = ?2`

func (s *Store) RecordHeartbeat(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("record heartbeat of %s: zero time", id)
	}
	if err := domain.CheckTime("heartbeat", at); err != nil {
		return fmt.Errorf("record heartbeat of %s: %w", id, err)
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		// SQLite counts the rows the WHERE clause matched, written or not,
		// so zero means the instance does not exist.
		res, err := tx.ExecContext(ctx, updateHeartbeat, formatTime(at), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return domain.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record heartbeat of %s: %w", id, err)
	}
	return nil
}
