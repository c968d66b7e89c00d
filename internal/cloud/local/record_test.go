package local

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

func TestAdoptedStateFollowsTheRecordAndWhatIsLeft(t *testing.T) {
	const (
		none      = procNone
		leader    = procLeader
		leftovers = procLeftovers
	)
	cases := []struct {
		recorded domain.CloudState
		live     liveness
		want     domain.CloudState
	}{
		{domain.CloudRunning, leader, domain.CloudRunning},
		{domain.CloudRunning, leftovers, domain.CloudRunning}, // its watcher halts them as an exit on its own
		{domain.CloudRunning, none, domain.CloudStopped},
		{domain.CloudPending, leader, domain.CloudRunning},
		{domain.CloudPending, none, domain.CloudStopped},
		{domain.CloudStopping, leader, domain.CloudStopping},
		{domain.CloudStopping, leftovers, domain.CloudStopping},
		{domain.CloudStopping, none, domain.CloudStopped},
		{domain.CloudStopped, leader, domain.CloudStopping},
		{domain.CloudStopped, none, domain.CloudStopped},
		{domain.CloudShuttingDown, leader, domain.CloudShuttingDown},
		{domain.CloudShuttingDown, none, domain.CloudShuttingDown},
		{domain.CloudTerminated, leftovers, domain.CloudShuttingDown},
		{domain.CloudTerminated, none, domain.CloudShuttingDown},
	}
	for _, tc := range cases {
		if got := adoptedState(tc.recorded, tc.live); got != tc.want {
			t.Errorf("adoptedState(%s, %d) = %s, want %s", tc.recorded, tc.live, got, tc.want)
		}
	}
}

func TestAdoptionTellsTheRecordedProcessFromAnother(t *testing.T) {
	const id = "l-0000000000c1"
	cases := []struct {
		name      string
		startTime func(l *leader) uint64
		namesEnv  bool // the process's command line holds the env file's path
		exited    bool
		want      domain.CloudState
	}{
		{"its start time", func(l *leader) uint64 { return l.start }, false, false, domain.CloudRunning},
		{"another start time: the pid was reused", func(l *leader) uint64 { return l.start + 1 }, false, false, domain.CloudStopped},
		{"no start time, a command line naming the env file", func(*leader) uint64 { return 0 }, true, false, domain.CloudRunning},
		{"no start time, another command line", func(*leader) uint64 { return 0 }, false, false, domain.CloudStopped},
		{"exited", func(l *leader) uint64 { return l.start }, false, true, domain.CloudStopped},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			arg := "-"
			if tc.namesEnv {
				arg = machinePaths(dir, id).EnvFile
			}
			l := startLeader(t, "sleep", arg)
			if tc.exited {
				_ = l.cmd.Process.Kill()
				l.waitExit(t)
			}
			// Written directly: writeMachine would fill in a zero start time.
			if err := os.Mkdir(filepath.Join(dir, id), 0o700); err != nil {
				t.Fatal(err)
			}
			rec := Record{ID: id, State: domain.CloudRunning, PID: l.pid, StartTime: tc.startTime(l)}
			if err := writeRecord(filepath.Join(dir, id), rec); err != nil {
				t.Fatal(err)
			}
			c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command})
			if got := stateOf(t, c, id); got != tc.want {
				t.Fatalf("%s adopted %s, want %s", id, got, tc.want)
			}
			if err := c.Terminate(t.Context(), []string{id}); err != nil {
				t.Fatalf("Terminate: %v", err)
			}
			waitState(t, c, id, domain.CloudTerminated)
			if tc.want == domain.CloudRunning {
				l.waitExit(t)
			} else if !tc.exited && !l.running() {
				t.Errorf("a process not taken for the machine's was ended by its termination")
			}
		})
	}
}

func TestAdoptionGoesOnWithWhatTheRecordAsked(t *testing.T) {
	const id = "l-0000000000d1"
	cases := []struct {
		recorded domain.CloudState
		want     domain.CloudState
	}{
		{domain.CloudRunning, domain.CloudRunning},
		{domain.CloudStopping, domain.CloudStopped},
		{domain.CloudStopped, domain.CloudStopped},
		{domain.CloudShuttingDown, domain.CloudTerminated},
		{domain.CloudTerminated, domain.CloudTerminated},
	}
	for _, tc := range cases {
		t.Run(string(tc.recorded), func(t *testing.T) {
			dir := t.TempDir()
			l := startLeader(t, "sleep", "-")
			if err := writeMachine(dir, Record{ID: id, State: tc.recorded, PID: l.pid}); err != nil {
				t.Fatalf("writeMachine: %v", err)
			}
			c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command})
			waitState(t, c, id, tc.want)
			if tc.want == domain.CloudRunning {
				return // Close ends it; startLeader's cleanup checks it was reaped
			}
			l.waitExit(t)
			_, err := os.Stat(filepath.Join(dir, id))
			if removed := os.IsNotExist(err); removed != (tc.want == domain.CloudTerminated) {
				t.Errorf("directory removed: %v, want %v", removed, tc.want == domain.CloudTerminated)
			}
		})
	}
}

func TestLeftoversOfARecordedProcessGroupAreHalted(t *testing.T) {
	dir := t.TempDir()
	l := startLeader(t, "child", t.TempDir())
	_ = l.cmd.Process.Kill()
	l.waitExit(t)
	const id = "l-0000000000e1"
	if err := writeMachine(dir, Record{ID: id, PID: l.pid}); err != nil {
		t.Fatalf("writeMachine: %v", err)
	}
	c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command, StopGrace: 100 * time.Millisecond})
	waitState(t, c, id, domain.CloudStopped)
	wantGone(t, "leftover child ignoring SIGTERM", l.child)
}

func TestMachineRecordFollowsEveryChange(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 3, 29, 9, 0, 0, 0, time.UTC))
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Command: h.command, Clock: clk})
	tags := map[string]string{domain.TagPool: "a"}
	id := create(t, c, 1, tags)[0]
	h.ready(id)
	m, _ := c.Machine(id)
	file := filepath.Join(m.Dir, RecordFile)
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 600", RecordFile, info, err)
	}
	pid := pidOf(t, c, id)
	want := Record{ID: id, State: domain.CloudRunning, Tags: tags, InstanceType: InstanceType,
		UsageClass: UsageClass, LaunchedAt: clk.Now(), PID: pid}
	wantRecord(t, m.Dir, want, true)

	if err := c.Tag(t.Context(), []string{id}, map[string]string{"k": "v"}); err != nil {
		t.Fatalf("Tag: %v", err)
	}
	want.Tags = map[string]string{domain.TagPool: "a", "k": "v"}
	wantRecord(t, m.Dir, want, true)

	if err := c.Stop(t.Context(), []string{id}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitState(t, c, id, domain.CloudStopped)
	want.State, want.PID = domain.CloudStopped, 0
	wantRecord(t, m.Dir, want, false)

	clk.Advance(time.Minute)
	if err := c.Start(t.Context(), []string{id}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.ready(id)
	want.State, want.PID, want.LaunchedAt = domain.CloudRunning, pidOf(t, c, id), clk.Now()
	wantRecord(t, m.Dir, want, true)
	entries, _ := os.ReadDir(m.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("machine directory holds %s, want no temporary files", e.Name())
		}
	}
}

// wantRecord checks the record in dir; a start time is wanted exactly when
// the record has a pid.
func wantRecord(t *testing.T, dir string, want Record, hasStart bool) {
	t.Helper()
	got, err := readRecord(dir)
	if err != nil {
		t.Fatalf("read the record: %v", err)
	}
	if (got.StartTime != 0) != hasStart {
		t.Errorf("record start time %d, want one: %v", got.StartTime, hasStart)
	}
	got.StartTime = 0
	if got.ID != want.ID || got.State != want.State || !maps.Equal(got.Tags, want.Tags) ||
		got.InstanceType != want.InstanceType || got.UsageClass != want.UsageClass ||
		!got.LaunchedAt.Equal(want.LaunchedAt) || got.PID != want.PID {
		t.Errorf("record = %+v, want %+v", got, want)
	}
}

func TestUnusableRecordsAreSkippedWithAWarning(t *testing.T) {
	dir := t.TempDir()
	put := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if content != "" {
			if err := os.WriteFile(filepath.Join(dir, name, RecordFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("l-garbage", "{not json")
	put("l-wrongid", `{"id": "l-other"}`)
	put("l-badstate", `{"id": "l-badstate", "state": "exploded"}`)
	put("l-pidone", `{"id": "l-pidone", "pid": 1}`)
	put("l-norecord", "")
	put(".hidden", `{"id": ".hidden"}`)
	put("l-good", `{"id": "l-good", "tags": {"k": "v"}}`)
	var logs testlog.Buffer
	c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})

	for range 2 {
		got, err := c.List(t.Context(), domain.CloudFilter{})
		if err != nil || len(got) != 1 || got[0].ID != "l-good" || got[0].State != domain.CloudStopped {
			t.Fatalf("List = %+v, %v; want l-good stopped", got, err)
		}
	}
	_, err := c.List(t.Context(), domain.CloudFilter{IDs: []string{"l-garbage"}})
	cloudtest.WantCode(t, err, domain.ErrUnknownInstance, ec2like.CodeNotFound)
	for _, name := range []string{"l-garbage", "l-wrongid", "l-badstate", "l-pidone"} {
		if n := strings.Count(logs.String(), filepath.Join(dir, name)+" "); n != 1 {
			t.Errorf("%d warnings about %s, want 1:\n%s", n, name, logs.String())
		}
	}
	if strings.Contains(logs.String(), "l-norecord") || strings.Contains(logs.String(), ".hidden") {
		t.Errorf("warned about a directory without a record, or a hidden one:\n%s", logs.String())
	}

	put("l-garbage", `{"id": "l-garbage"}`)
	if got := stateOf(t, c, "l-garbage"); got != domain.CloudStopped {
		t.Errorf("a repaired record adopted %s, want stopped", got)
	}
}

func TestOneCloudAtATimeManagesADirectory(t *testing.T) {
	dir := t.TempDir()
	first, err := New(Options{Dir: dir, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if second, err := New(Options{Dir: dir}); err == nil {
		_ = second.Close()
		t.Fatalf("a second Cloud opened a directory in use")
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	newCloud(t, Options{Dir: dir})
}

func TestAWrittenMachineThatCannotBeAdoptedIsRefused(t *testing.T) {
	dir := t.TempDir()
	notLeader := exec.Command(os.Args[0], "helper", "sleep", "-") // in the test's process group
	if err := notLeader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = notLeader.Process.Kill()
		_ = notLeader.Wait()
	})
	for _, r := range []Record{
		{ID: ""},
		{ID: "../escape"},
		{ID: ".hidden"},
		{ID: "a/b"},
		{ID: "l-1", State: "exploded"},
		{ID: "l-1", PID: 1},
		{ID: "l-1", PID: -4},
		{ID: "l-1", PID: notLeader.Process.Pid},
	} {
		if err := writeMachine(dir, r); err == nil {
			t.Errorf("writeMachine(%+v) succeeded", r)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused records left %v", entries)
	}
	if err := writeMachine(dir, Record{ID: "l-1"}); err != nil {
		t.Fatalf("writeMachine: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "l-1", RecordFile))
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil || fields["state"] != "stopped" ||
		fields["instance_type"] != InstanceType || fields["launched_at"] == nil {
		t.Errorf("%s = %s (%v), want defaults filled in", RecordFile, b, err)
	}
}
