package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

const statusAdminToken = "status-admin-token-4e1f"

// statusNow is the instant of the status tests: the store's and the
// command's clock.
var statusNow = time.Now().UTC().Truncate(time.Second)

// statusServer is the real status API on a store holding two pools and
// jobs of every status.
func statusServer(t *testing.T) string {
	t.Helper()
	now := statusNow
	st, _ := sqlitetest.Open(t, clock.NewVirtual(now))
	ctx := context.Background()
	for _, ps := range []domain.PoolStatus{
		{Name: "small-x64", Schedule: "default", Target: domain.Target{Hot: 1, Stopped: 2},
			Counts: map[string]int{"ready_hot": 1, "stopped": 2}, LastCycle: now.Add(-30 * time.Second)},
		{Name: "burst", Schedule: "default+autoscale", Target: domain.Target{Hot: 3},
			Counts: map[string]int{"ready_hot": 1, "warming": 2, "detached": 1}, LastCycle: now.Add(-125 * time.Second), LastError: "StartInstances: throttled\x1b[31m"},
	} {
		if err := st.PutPoolStatus(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	// The API counts the pools' instances as they are, whatever the last
	// cycle recorded.
	var insts []domain.Instance
	member := func(pool string, role domain.Role, state domain.State, job string) {
		insts = append(insts, domain.Instance{ID: fmt.Sprintf("i-%d", len(insts)+1), Pool: pool, Role: role, Runner: pool, State: state, Job: job})
	}
	member("small-x64", domain.RoleHot, domain.StateReady, "")
	member("small-x64", domain.RoleStopped, domain.StateStopped, "")
	member("small-x64", domain.RoleStopped, domain.StateStopped, "")
	member("small-x64", domain.RoleHot, domain.StateTerminated, "")
	member("burst", domain.RoleHot, domain.StateReady, "")
	member("burst", domain.RoleHot, domain.StatePending, "")
	member("burst", domain.RoleHot, domain.StateBooting, "")
	member("burst", domain.RoleHot, domain.StateClaimed, "12")
	if err := st.CreateInstances(ctx, insts); err != nil {
		t.Fatal(err)
	}
	q := now.Add(-time.Minute)
	jobs := []domain.Job{
		{ID: 1, Status: domain.JobQueued, Repo: "acme/app", QueuedAt: q},
		{ID: 2, Status: domain.JobRejected, Repo: "acme/app", QueuedAt: q, Reason: "pool \"gpu\" is not configured\x1b]0;pwned\x07"},
		// Held for an environment's approval longer than any job waits for a
		// runner: it is neither queued nor the oldest wait.
		{ID: 3, Status: domain.JobQueued, Repo: "acme/app", QueuedAt: now.Add(-time.Hour), Reason: intake.ReasonWaiting},
	}
	if _, err := st.CreateJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for k, wait := range []time.Duration{2 * time.Second, 4 * time.Second, 40 * time.Second} {
		j := domain.Job{ID: int64(10 + k), Status: domain.JobQueued, Repo: "acme/app", QueuedAt: q}
		if _, err := st.CreateJobs(ctx, []domain.Job{j}); err != nil {
			t.Fatal(err)
		}
		via := []domain.Via{domain.ViaPool, domain.ViaPool, domain.ViaCold}[k]
		_, err := st.TransitionJob(ctx, j.ID, domain.JobGuard{Status: domain.JobQueued}, func(n *domain.Job) {
			n.Status, n.Via, n.InstanceID, n.AssignedAt, n.StartedAt = domain.JobRunning, via, "bp-1", q, q.Add(wait)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	srv := &api.Server{Store: st, Token: statusAdminToken, Pools: func() []api.PoolInfo {
		return []api.PoolInfo{{Name: "small-x64", Timezone: "Europe/Paris", NextChange: now.Add(2 * time.Hour), Next: "nights"}, {Name: "burst"}, {Name: "new"}}
	}}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func runStatus(t *testing.T, environ map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return environ[k] },
		now: func() time.Time { return statusNow }}
	code := run(context.Background(), e, append([]string{"status"}, args...))
	return code, out.String(), errb.String()
}

func TestStatusPrintsThePoolsAndJobs(t *testing.T) {
	base := statusServer(t)
	code, out, errs := runStatus(t, map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, "--server", base)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	wantAll(t, "output", out,
		"  pool           schedule          hot       stopped   warming  serving  last cycle        next change",
		"✓ small-x64      default           1/1       2/2       0        0        30s ago           nights in 2h00m (",
		"  burst          default+autoscale 1/3       0/0       2        1        2m5s ago          -",
		"  new            (none)            0/-       0/-       0        0        not converged yet -",
		"  ! burst: StartInstances: throttled[31m",
		"jobs: 1 queued, 0 assigned, 3 running, 1 held for approval\n  the oldest waiting for a runner has waited 1m0s\n",
		"of the latest 6: 0 completed, 1 rejected",
		"  pool     2 jobs   p50   4.0s   p90   4.0s   max   4.0s",
		"  cold     1 jobs   p50  40.0s   p90  40.0s   max  40.0s",
		`  2  acme/app  pool "gpu" is not configured]0;pwned`,
	)
	// No member and no target read as zero would be "at target".
	if strings.Contains(out, "✓ new") {
		t.Error("a pool with no recorded cycle is marked at target")
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Error("control characters from the store reached the terminal")
	}
}

func TestStatusRefusals(t *testing.T) {
	base := statusServer(t)
	tokenFile := writeFile(t, t.TempDir(), "token", statusAdminToken+"\n")
	cases := []struct {
		name    string
		environ map[string]string
		args    []string
		code    int
		want    string
	}{
		{"no token", nil, []string{"--server", base}, 2, "no admin token: set $BULLPEN_ADMIN_TOKEN"},
		{"wrong token", map[string]string{"BULLPEN_ADMIN_TOKEN": "nope"}, []string{"--server", base}, 1, "401 Unauthorized: missing or wrong admin token"},
		{"token file", nil, []string{"--server", base, "--admin-token-file", tokenFile}, 0, ""},
		{"server from the environment", map[string]string{"BULLPEN_SERVER": base, "BULLPEN_ADMIN_TOKEN_FILE": tokenFile}, nil, 0, ""},
		{"no server there", map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, []string{"--server", "http://127.0.0.1:1"}, 1, "GET /api/v1/pools"},
		{"not a URL", map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, []string{"--server", "localhost:8080"}, 2, "want http://HOST:PORT"},
		{"bad --jobs", map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, []string{"--jobs", "0"}, 2, "--jobs 0: want 1..1000"},
	}
	for _, c := range cases {
		code, _, errs := runStatus(t, c.environ, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want %d and %q", c.name, code, errs, c.code, c.want)
		}
		if strings.Contains(errs, statusAdminToken) {
			t.Errorf("%s: the token is in the message", c.name)
		}
	}
}

// A backlog longer than a page of the status API is read page after page,
// so its counts are whole; counts that stop at activeListed say so.
func TestStatusCountsABacklogLongerThanAPage(t *testing.T) {
	st, _ := sqlitetest.Open(t, clock.NewVirtual(statusNow))
	backlog := make([]domain.Job, api.MaxLimit+5)
	for i := range backlog {
		backlog[i] = domain.Job{ID: int64(i + 1), Status: domain.JobQueued, Repo: "acme/app", QueuedAt: statusNow.Add(-time.Duration(i) * time.Second)}
	}
	if _, err := st.CreateJobs(t.Context(), backlog); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer((&api.Server{Store: st, Token: statusAdminToken}).Handler())
	t.Cleanup(ts.Close)
	code, out, errs := runStatus(t, map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, "--server", ts.URL)
	if code != 0 || !strings.Contains(out, "jobs: 1005 queued, 0 assigned, 0 running, 0 held for approval\n") || strings.Contains(out, "are more") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}

	var buf bytes.Buffer
	printJobs(&buf, statusNow, []api.JobView{{ID: 1, Status: "queued"}, {ID: 2, Status: "queued"}, {ID: 3, Status: "running"}}, true, nil)
	if !strings.Contains(buf.String(), "(the oldest 3 active jobs only: there are more, and newer)") {
		t.Fatalf("counts that stop short do not say so:\n%s", buf.String())
	}
}

func TestStatusSaysWhenNoJobHasStartedYet(t *testing.T) {
	st, _ := sqlitetest.Open(t, clock.NewVirtual(statusNow))
	if _, err := st.CreateJobs(t.Context(), []domain.Job{{ID: 1, Status: domain.JobQueued, Repo: "acme/app", QueuedAt: statusNow}}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer((&api.Server{Store: st, Token: statusAdminToken}).Handler())
	t.Cleanup(ts.Close)
	code, out, errs := runStatus(t, map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, "--server", ts.URL)
	if code != 0 || !strings.Contains(out, "of the latest 1: 0 completed, 0 rejected; none started yet, so no queue times\n") ||
		strings.Contains(out, "by how they were served") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
}

// A job waits for a runner from its queuing until it starts, assigned or
// not; one GitHub holds for an approval waits for a person and is counted
// apart.
func TestStatusOldestWaitCoversAssignedJobsNotApprovals(t *testing.T) {
	at := func(d time.Duration) *time.Time { x := statusNow.Add(-d); return &x }
	active := []api.JobView{
		{ID: 1, Status: "queued", QueuedAt: at(time.Minute)},
		{ID: 2, Status: "assigned", QueuedAt: at(5 * time.Minute), AssignedAt: at(4 * time.Minute)},
		{ID: 3, Status: "queued", QueuedAt: at(time.Hour), Reason: intake.ReasonWaiting},
		{ID: 4, Status: "queued", QueuedAt: at(2 * time.Hour), Reason: intake.ReasonWaiting},
		{ID: 5, Status: "running", QueuedAt: at(3 * time.Hour), StartedAt: at(2 * time.Hour)},
	}
	var out bytes.Buffer
	printJobs(&out, statusNow, active, false, nil)
	want := "jobs: 1 queued, 1 assigned, 1 running, 2 held for approval\n  the oldest waiting for a runner has waited 5m0s\n"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	printJobs(&out, statusNow, active[2:4], false, nil)
	if !strings.HasPrefix(out.String(), "\njobs: 0 queued, 0 assigned, 0 running, 2 held for approval\nof the latest") {
		t.Fatalf("jobs held for approval alone wait for no runner:\n%s", out.String())
	}
}

// An error answer that is not the API's JSON is shown as it came, on one
// line and cut short, where status said only "no message".
func TestStatusShowsAnErrorAnswerThatIsNotTheAPIs(t *testing.T) {
	page := "<html>\n<body>\n  <h1>502 Bad Gateway</h1>\n" + strings.Repeat("<p>padding</p>\n", 100) + "</body></html>\n"
	for _, tc := range []struct {
		body, want string
		cut        bool
	}{
		{"/api/v1/pools: not served on this address\n", "404 Not Found: /api/v1/pools: not served on this address", false},
		{page, "404 Not Found: <html> <body> <h1>502 Bad Gateway</h1> <p>padding</p>", true},
		{"", "404 Not Found: no message", false},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, tc.body)
		}))
		code, _, errs := runStatus(t, map[string]string{"BULLPEN_ADMIN_TOKEN": statusAdminToken}, "--server", ts.URL)
		ts.Close()
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "</html>") || strings.Contains(errs, "…") != tc.cut {
			t.Errorf("an answer %.40q: exit %d, %q; want 1 and %q, cut short %t", tc.body, code, errs, tc.want, tc.cut)
		}
	}
}

// Pointed at the public address of a serve whose operators' surfaces are
// on --admin-listen, status says the API is served there.
func TestStatusOnThePublicAddressNamesAdminListen(t *testing.T) {
	s := startServe(t, "--admin-listen", "127.0.0.1:0")
	code, _, errs := runWithEnv(map[string]string{"BULLPEN_SERVER": "http://" + s.addr, "BULLPEN_ADMIN_TOKEN": "hardening admin token"}, "status")
	if code != 1 || !strings.Contains(errs, "status API is not served on this address but on the operators' address (--admin-listen)") {
		t.Errorf("status on the public address: exit %d, %q; want 1 saying the API is on --admin-listen", code, errs)
	}
	if code, _ := s.stop(t); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, s.logs)
	}
}
