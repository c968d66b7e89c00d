package sqlite

import (
	"database/sql"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// migrationFiles returns the embedded migrations plus a trivial one for each
// of names, which tests number from 9001 to come after any real one.
func migrationFiles(names ...string) fstest.MapFS {
	fsys := trivialMigrations(names...)
	real, err := fs.ReadDir(migrationsFS(), ".")
	if err != nil {
		panic(err)
	}
	for _, e := range real {
		data, err := fs.ReadFile(migrationsFS(), e.Name())
		if err != nil {
			panic(err)
		}
		fsys[e.Name()] = &fstest.MapFile{Data: data}
	}
	return fsys
}

// trivialMigrations returns one CREATE TABLE migration per name.
func trivialMigrations(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		table := "t" + strings.TrimSuffix(n, ".sql")
		fsys[n] = &fstest.MapFile{Data: []byte("CREATE TABLE " + table + " (x INTEGER); CREATE INDEX " + table + "_x ON " + table + " (x);")}
	}
	return fsys
}

// applied lists the versions recorded in schema_migrations, in order.
func applied(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.readers.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// migrateTo opens the store at path with only the given migrations, and
// closes it.
func migrateTo(t *testing.T, path string, clk *clock.Virtual, files ...string) {
	t.Helper()
	s, err := open(t.Context(), path, clk, migrationFiles(files...), false)
	if err != nil {
		t.Fatalf("migrate to %v: %v", files, err)
	}
	s.Close()
}

func TestEmbeddedMigrationsIdempotentOnReopen(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	known, err := loadMigrations(migrationsFS())
	if err != nil || len(known) == 0 {
		t.Fatalf("embedded migrations: %v, %v", known, err)
	}
	for range 3 {
		s, err := Open(t.Context(), path, clk)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if got := applied(t, s); len(got) != len(known) {
			t.Fatalf("applied %v, want %d migrations", got, len(known))
		}
		s.Close()
	}
}

func TestReopenAppliesOnlyNewMigrations(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	migrateTo(t, path, clk, "9001_a.sql")
	// Were 9001 run again, CREATE TABLE would fail on the existing table.
	s, err := open(t.Context(), path, clk, migrationFiles("9001_a.sql", "9002_b.sql", "9003_c.sql"), false)
	if err != nil {
		t.Fatalf("reopen with new migrations: %v", err)
	}
	defer s.Close()
	got := applied(t, s)
	if n := len(got); n < 3 || got[n-3] != 9001 || got[n-1] != 9003 {
		t.Fatalf("applied %v, want the real migrations then 9001..9003", got)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	migrateTo(t, path, clk, "9001_a.sql", "9002_b.sql")
	_, err := open(t.Context(), path, clk, migrationFiles("9001_a.sql"), false)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("got %v, want ErrNewerSchema", err)
	}
	for _, want := range []string{"9002_b", "9001", "upgrade bullpen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The real binary refuses it too.
	if _, err := Open(t.Context(), path, clk); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("embedded migrations: got %v, want ErrNewerSchema", err)
	}
}

func TestMigrationAddedBelowAppliedOneRefused(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	migrateTo(t, path, clk, "9001_a.sql", "9003_c.sql")
	_, err := open(t.Context(), path, clk, migrationFiles("9001_a.sql", "9002_b.sql", "9003_c.sql"), false)
	if err == nil || !strings.Contains(err.Error(), "9002_b is pending") {
		t.Fatalf("got %v, want a refusal naming 9002_b", err)
	}
}

func TestFailingMigrationLeavesNoTrace(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	fsys := migrationFiles("9001_a.sql")
	fsys["9002_bad.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE half (x INTEGER); NOT SQL;")}
	if _, err := open(t.Context(), path, clk, fsys, false); err == nil || !strings.Contains(err.Error(), "9002_bad") {
		t.Fatalf("got %v, want an error naming 9002_bad", err)
	}
	// 9001 stays applied; the broken 9002 left neither its table nor a record.
	s, err := open(t.Context(), path, clk, migrationFiles("9001_a.sql", "9002_half.sql"), false)
	if err != nil {
		t.Fatalf("reopen with a fixed 9002: %v", err)
	}
	defer s.Close()
	if got := applied(t, s); got[len(got)-1] != 9002 {
		t.Fatalf("applied %v, want 9002 last", got)
	}
	var n int
	if err := s.readers.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_schema WHERE name = 'half'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table from the failed migration: count %d, %v", n, err)
	}
}

func TestMigrationNamesChecked(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		want  string
	}{
		{"no number", []string{"init.sql"}, "name must look like"},
		{"short number", []string{"01_init.sql"}, "name must look like"},
		{"capitals", []string{"0001_Init.sql"}, "name must look like"},
		{"version zero", []string{"0000_init.sql"}, "start at 0001"},
		{"shared version", []string{"0001_a.sql", "0001_b.sql"}, "share version 0001"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadMigrations(trivialMigrations(c.files...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	got, err := loadMigrations(trivialMigrations("0010_j.sql", "0002_b.sql", "0001_a.sql"))
	if err != nil || len(got) != 3 || got[0].Version != 1 || got[1].Version != 2 || got[2].Version != 10 {
		t.Fatalf("order: %+v, %v", got, err)
	}
}

// oldRelease writes the database an older release left at path: the
// embedded migrations named, and rows inserted with epoch as both their
// created_at and updated_at.
func oldRelease(t *testing.T, path string, clk *clock.Virtual, migrations []string, rows ...string) {
	t.Helper()
	old := fstest.MapFS{}
	for _, name := range migrations {
		data, err := fs.ReadFile(migrationsFS(), name)
		if err != nil {
			t.Fatal(err)
		}
		old[name] = &fstest.MapFile{Data: data}
	}
	db, err := sql.Open("sqlite", path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrate(t.Context(), db, old, clk.Now); err != nil {
		t.Fatal(err)
	}
	at := formatTime(epoch)
	for _, row := range rows {
		if _, err := db.ExecContext(t.Context(), row, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// A database written by the first release (instances only) opens with jobs,
// heartbeats and queues added, and its rows read back unchanged.
func TestUpgradeFromFirstSchema(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	oldRelease(t, path, clk, []string{"0001_initial.sql"},
		`INSERT INTO instances (id, state, version, created_at, updated_at) VALUES ('old', 'ready', 3, ?, ?)`)

	s := openAt(t, path, clk)
	got, err := s.GetInstance(t.Context(), "old")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != domain.StateReady || got.Version != 3 || !got.Heartbeat.IsZero() {
		t.Fatalf("upgraded row: %+v", got)
	}
	if err := s.RecordHeartbeat(t.Context(), "old", epoch.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJobs(t.Context(), []domain.Job{{ID: 1, Status: domain.JobQueued}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Queue(QueueOptions{}).Send(t.Context(), "q", []domain.SendRequest{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
}

// A database at migration 0004 (the runner registration on the job) opens
// with the registration moved to the instance: its rows read back, the
// instances start with no runner, and the jobs' old credential column is
// gone from the file.
func TestUpgradeFromJobRunnerConfig(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	oldRelease(t, path, clk, []string{"0001_initial.sql", "0002_instance_heartbeat.sql", "0003_jobs.sql", "0004_queues.sql"},
		`INSERT INTO instances (id, state, job, version, created_at, updated_at) VALUES ('bp-1', 'claimed', '42', 2, ?, ?)`,
		`INSERT INTO jobs (id, status, instance_id, runner_name, runner_id, runner_config, attempts, version, created_at, updated_at)
			VALUES (42, 'assigned', 'bp-1', 'bp-1-42', 7, 'jit-SECRET', 1, 3, ?, ?)`)

	s := openAt(t, path, clk)
	in, err := s.GetInstance(t.Context(), "bp-1")
	if err != nil {
		t.Fatal(err)
	}
	if in.State != domain.StateClaimed || in.Job != "42" || in.Version != 2 || in.RunnerName != "" || in.RunnerConfig != "" {
		t.Fatalf("upgraded instance: %+v", in)
	}
	j, err := s.GetJob(t.Context(), 42)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != domain.JobAssigned || j.InstanceID != "bp-1" || j.RunnerName != "bp-1-42" || j.RunnerID != 7 ||
		j.Attempts != 1 || j.Version != 3 {
		t.Fatalf("upgraded job: %+v", j)
	}
	var n int
	err = s.readers.QueryRowContext(t.Context(), `SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'runner_config'`).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("jobs.runner_config after the upgrade: count %d, %v", n, err)
	}

	in, err = s.Transition(t.Context(), "bp-1", domain.GuardOf(in), func(i *domain.Instance) {
		i.RunnerName, i.RunnerConfig = "bp-1-42", "jit-new"
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetInstance(t.Context(), "bp-1"); err != nil || got.RunnerName != "bp-1-42" || got.RunnerConfig != "jit-new" {
		t.Fatalf("runner on the upgraded instance: %q (config %t), %v", got.RunnerName, got.RunnerConfig == "jit-new", err)
	}
}

// A database from before the launch mark had its own column opens with
// every job unmarked, and a job marked since keeps its mark.
func TestUpgradeToTheLaunchMark(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	names, err := fs.Glob(migrationsFS(), "00*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := slices.DeleteFunc(names, func(n string) bool { return n >= "0012" })
	oldRelease(t, path, clk, before,
		`INSERT INTO jobs (id, status, instance_id, attempts, version, created_at, updated_at)
			VALUES (42, 'queued', '', 1, 3, ?, ?)`)

	s := openAt(t, path, clk)
	j, err := s.GetJob(t.Context(), 42)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.LaunchedOn != "" || j.Version != 3 {
		t.Fatalf("upgraded job: %+v", j)
	}
	m := domain.NewLifecycle(domain.Deadlines{}).LaunchFor(j, "bp-7")
	if _, err := s.TransitionJob(t.Context(), m.ID, m.Guard, m.Apply); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetJob(t.Context(), 42); err != nil || got.LaunchedOn != "bp-7" || got.InstanceID != "" {
		t.Fatalf("marked job after the upgrade: launched on %q, bound to %q, %v", got.LaunchedOn, got.InstanceID, err)
	}
}

// A database from before readmissions were counted on the row opens with
// every job never readmitted, its attempts as they were, and a rejected
// job readmitted since has its readmission kept.
func TestUpgradeToReadmissionsOnTheRow(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	names, err := fs.Glob(migrationsFS(), "00*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := slices.DeleteFunc(names, func(n string) bool { return n >= "0013" })
	oldRelease(t, path, clk, before,
		`INSERT INTO jobs (id, status, reason, instance_id, attempts, version, created_at, updated_at)
			VALUES (42, 'rejected', 'no pool', '', 2, 3, ?, ?)`)

	s := openAt(t, path, clk)
	j, err := s.GetJob(t.Context(), 42)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != domain.JobRejected || j.Readmissions != 0 || j.Attempts != 2 || j.Version != 3 {
		t.Fatalf("upgraded job: %+v", j)
	}
	r := domain.Lifecycle{}.Readmit(j)
	if _, err := s.TransitionJob(t.Context(), r.ID, r.Guard, r.Apply); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetJob(t.Context(), 42); err != nil || got.Readmissions != 1 || got.Attempts != 2 {
		t.Fatalf("readmitted job after the upgrade: readmissions %d, attempts %d, %v", got.Readmissions, got.Attempts, err)
	}
}
