package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// instanceColumns is the column order of every instance read and write.
const instanceColumns = `id, cloud_id, pool, role, runner, spec_hash, launch_id,
	state, job, job_started, version, deadline,
	created_at, updated_at, state_since, running_since, jobs_served, reason,
	instance_type, usage_class, cpu, memory_mib, heartbeat, runner_name, runner_config,
	bootstrap_hash, agent_token_hash`

const (
	insertInstance = `INSERT INTO instances (` + instanceColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`
	selectInstance = `SELECT ` + instanceColumns + ` FROM instances WHERE id = ?`
	updateInstance = `UPDATE instances SET
		cloud_id = ?, pool = ?, role = ?, runner = ?, spec_hash = ?, launch_id = ?,
		state = ?, job = ?, job_started = ?, version = ?, deadline = ?,
		created_at = ?, updated_at = ?, state_since = ?, running_since = ?, jobs_served = ?, reason = ?,
		instance_type = ?, usage_class = ?, cpu = ?, memory_mib = ?, heartbeat = ?,
		runner_name = ?, runner_config = ?, bootstrap_hash = ?, agent_token_hash = ?
		WHERE id = ?`
)

// instanceArgs returns the values of i in instanceColumns order.
func instanceArgs(i domain.Instance) []any {
	return []any{
		i.ID, i.CloudID, i.Pool, string(i.Role), i.Runner, i.SpecHash, i.LaunchID,
		string(i.State), i.Job, i.JobStarted, i.Version, formatTime(i.Deadline),
		formatTime(i.CreatedAt), formatTime(i.UpdatedAt), formatTime(i.StateSince), formatTime(i.RunningSince),
		i.JobsServed, i.Reason, i.InstanceType, i.UsageClass, i.CPU, i.MemoryMiB, formatTime(i.Heartbeat),
		i.RunnerName, i.RunnerConfig, i.BootstrapHash, i.AgentTokenHash,
	}
}

// updateArgs returns the arguments of updateInstance: every column but the
// id, then the id for the WHERE clause.
func updateArgs(i domain.Instance) []any {
	args := instanceArgs(i)
	return append(args[1:], i.ID)
}

type scanner interface{ Scan(dest ...any) error }

// scanInstance reads one row selected with instanceColumns.
func scanInstance(row scanner) (domain.Instance, error) {
	var i domain.Instance
	var role, state string
	var deadline, created, updated, since, running, heartbeat sql.NullString
	err := row.Scan(&i.ID, &i.CloudID, &i.Pool, &role, &i.Runner, &i.SpecHash, &i.LaunchID,
		&state, &i.Job, &i.JobStarted, &i.Version, &deadline,
		&created, &updated, &since, &running, &i.JobsServed, &i.Reason,
		&i.InstanceType, &i.UsageClass, &i.CPU, &i.MemoryMiB, &heartbeat, &i.RunnerName, &i.RunnerConfig,
		&i.BootstrapHash, &i.AgentTokenHash)
	if err != nil {
		return domain.Instance{}, err
	}
	i.Role, i.State = domain.Role(role), domain.State(state)
	var errs [6]error
	i.Deadline, errs[0] = parseTime(deadline)
	i.CreatedAt, errs[1] = parseTime(created)
	i.UpdatedAt, errs[2] = parseTime(updated)
	i.StateSince, errs[3] = parseTime(since)
	i.RunningSince, errs[4] = parseTime(running)
	i.Heartbeat, errs[5] = parseTime(heartbeat)
	if err := errors.Join(errs[:]...); err != nil {
		return domain.Instance{}, fmt.Errorf("instance %s: %w", i.ID, err)
	}
	return i, nil
}

// CreateInstances inserts insts in one transaction: all of them or, when an
// id is taken (ErrExists) or a row is invalid, none. The store owns the
// bookkeeping: every row starts at Version 1 with CreatedAt, UpdatedAt and
// StateSince set to the clock's now.
func (s *Store) CreateInstances(ctx context.Context, insts []domain.Instance) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("create instances: %w", err)
	}
	if len(insts) == 0 {
		return nil
	}
	for _, inst := range insts {
		if err := inst.Validate(); err != nil {
			return fmt.Errorf("create instances: %w", err)
		}
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := s.txStmt(ctx, tx, insertInstance)
		if err != nil {
			return err
		}
		now := s.clk.Now().UTC()
		for _, inst := range insts {
			inst.Version = 1
			inst.CreatedAt, inst.UpdatedAt, inst.StateSince = now, now, now
			res, err := stmt.ExecContext(ctx, instanceArgs(inst)...)
			if err != nil {
				return fmt.Errorf("insert instance %s: %w", inst.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("insert instance %s: %w", inst.ID, err)
			} else if n == 0 {
				return fmt.Errorf("instance %s: %w", inst.ID, domain.ErrExists)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create instances: %w", err)
	}
	return nil
}

// GetInstance returns the instance with id, or ErrNotFound.
func (s *Store) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	return instanceKind.getRow(ctx, s, id)
}

// ListInstances returns the instances matching f, oldest first by
// CreatedAt then ID, or newest first when f.Newest is set, at most f.Limit,
// and only those past f.After when it is set.
func (s *Store) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	if f.After != nil {
		if err := domain.CheckTime("position", f.After.CreatedAt); err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
	}
	query, args := listQuery(f)
	return instanceKind.listRows(ctx, s, query, args)
}

// listQuery builds the SELECT for f: one condition per non-zero field.
func listQuery(f domain.InstanceFilter) (string, []any) {
	var conds []string
	var args []any
	for _, c := range []struct{ column, value string }{
		{"pool", f.Pool}, {"runner", f.Runner}, {"job", f.Job}, {"cloud_id", f.CloudID}, {"agent_token_hash", f.TokenHash},
	} {
		if c.value != "" {
			conds = append(conds, c.column+" = ?")
			args = append(args, c.value)
		}
	}
	if len(f.States) > 0 {
		conds = append(conds, "state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if !f.ExpiredAt.IsZero() {
		conds = append(conds, "deadline <= ?") // a NULL (no) deadline never matches
		args = append(args, formatTime(f.ExpiredAt))
	}
	conds, args = passed(conds, args, f.After, f.Newest)
	return orderedListing(`SELECT `+instanceColumns+` FROM instances`, conds, args, f.Newest, f.Limit)
}

// passed adds the condition that keeps the rows past p in a listing's
// order, when p is set. A row value compares as the ORDER BY sorts, and
// where the query reads the index of (created_at, id) it reads it from
// p on, so a page far into a listing does not read the rows before it.
func passed[ID int64 | string](conds []string, args []any, p *domain.ListPosition[ID], newest bool) ([]string, []any) {
	if p == nil {
		return conds, args
	}
	op := ">"
	if newest {
		op = "<"
	}
	// Not formatTime: a zero time is a position before every row, not NULL.
	return append(conds, "(created_at, id) "+op+" (?, ?)"), append(args, p.CreatedAt.UTC().Format(timeLayout), p.ID)
}

// orderedListing completes a listing's query: its conditions, the order
// listings share (created, then id; newest first when asked) and a limit
// (0: none).
func orderedListing(selectFrom string, conds []string, args []any, newest bool, limit int) (string, []any) {
	query := selectFrom
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, " AND ")
	}
	if newest {
		query += ` ORDER BY created_at DESC, id DESC`
	} else {
		query += ` ORDER BY created_at, id`
	}
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, limit)
	}
	return query, args
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// deleteChunk keeps each IN list well under SQLite's bound-parameter limit.
const deleteChunk = 500

// DeleteInstances removes the terminated rows among ids; ids with no row are
// ignored. If any row is in another state, it deletes nothing and names them.
func (s *Store) DeleteInstances(ctx context.Context, ids []string) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var live []string
		for _, chunk := range domain.Chunk(ids, deleteChunk) {
			found, err := notTerminated(ctx, tx, chunk)
			if err != nil {
				return err
			}
			live = append(live, found...)
		}
		if len(live) > 0 {
			slices.Sort(live)
			return fmt.Errorf("refusing to delete instances not in state %s: %s",
				domain.StateTerminated, strings.Join(slices.Compact(live), ", "))
		}
		for _, chunk := range domain.Chunk(ids, deleteChunk) {
			q := `DELETE FROM instances WHERE id IN (` + placeholders(len(chunk)) + `)`
			if _, err := tx.ExecContext(ctx, q, anys(chunk)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	return nil
}

// notTerminated returns "id (state)" for each of ids whose row is not terminated.
func notTerminated(ctx context.Context, tx *sql.Tx, ids []string) ([]string, error) {
	q := `SELECT id, state FROM instances WHERE state <> ? AND id IN (` + placeholders(len(ids)) + `)`
	rows, err := tx.QueryContext(ctx, q, append([]any{string(domain.StateTerminated)}, anys(ids)...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s (%s)", id, state))
	}
	return out, rows.Err()
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
