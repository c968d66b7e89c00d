package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Labels, repository names, runner names and reasons come from webhooks:
// every page shows them as text, never as markup.
func TestEveryValueFromAWebhookIsEscaped(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	shown := map[string]bool{}
	for _, p := range append(pagePaths, "/jobs/105", "/jobs/103", "/jobs?pool=gpu") {
		body := r.page(p)
		if n := count(body, "<script"); n != 1 || !strings.Contains(body, `<script src="/assets/app.js" defer></script>`) {
			t.Errorf("%s: %d script elements, want only the page's own", p, n)
		}
		for _, raw := range []string{"<img", "<b>", "<i>", "onerror=alert(1)>"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: %q reached the page unescaped", p, raw)
			}
		}
		if strings.Contains(body, "&lt;script&gt;window.pwned=1&lt;/script&gt;") {
			shown[p] = true
		}
		if strings.Contains(body, "JITCONFIG-SECRET") {
			t.Errorf("%s: a runner configuration reached the page", p)
		}
	}
	for _, p := range []string{"/jobs", "/jobs/105"} {
		if !shown[p] {
			t.Errorf("%s does not show the rejected job's label as text", p)
		}
	}
}

func TestPoolsPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.pageShows("/",
		`data-all-at-target="false"`, // burst holds nothing yet
		`data-pool="small-x64" data-at-target="true"`,
		`data-pool="burst" data-at-target="false"`,
		`<dd class="hot">1<small>/1</small></dd>`, `<dd class="stopped">2<small>/2</small></dd>`,
		// 10:00 in Paris: the nights entry starts at 22:00 local.
		`Next: <strong>nights</strong> (hot 0, stopped 2) on Tue 22:00 CET, in <span data-until="2026-11-24T21:00:00Z">12h00m</span>`,
		`Autoscaler: <strong>up</strong>, hot 3 (max 5); breach score 1.71 against 1.50.`,
		"Tue 22:00–24:00 nights: hot 0, stopped 2", "Mon 06:00–22:00 default: hot 1, stopped 2",
		`class="now"`, "p50 3.0s", // job 104 waited 3 s
	)
}

func TestJobsPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.pageShows("/jobs",
		`<dd id="count-queued">1</dd>`, `<dd id="count-assigned">1</dd>`, `<dd id="count-running">1</dd>`,
		`data-job="104" data-status="completed"`, `<span class="served path-hot">hot</span>`,
		`data-job="105" data-status="rejected"`, `pool &#34;gpu&#34; is not configured`,
		"1 jobs · p50 3.0s · p90 3.0s", `aria-label="Queue time (queued to started) by how jobs were served"`,
	)
	small := r.page("/jobs?pool=small-x64")
	if strings.Contains(small, `data-job="105"`) || strings.Contains(small, `data-job="103"`) {
		t.Error("the pool filter lets through jobs of other pools")
	}
}

// A job's queue time is known once it starts: the chart counts the jobs
// that started, running ones too, and its note says how many it shows.
func TestJobsPageChartsTheJobsThatStarted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	// Job 103 runs (cold, 55 s in the queue), job 104 finished (hot, 3 s).
	r.pageShows("/jobs", "for the 2 latest jobs that started, running or finished.",
		"1 jobs · p50 55s · p90 55s", "1 jobs · p50 3.0s · p90 3.0s")

	idle := newRig(t)
	q := t0.Add(-time.Minute)
	idle.createJobs(domain.Job{ID: 201, RunID: 2010, Repo: "acme/app", Name: "build", QueuedAt: q, Route: domain.RouteLaunch,
		Runner: "small", Status: domain.JobAssigned, InstanceID: "bp-new1", Via: domain.ViaCold, AssignedAt: q})
	body := idle.pageShows("/jobs", "From GitHub queuing a job to its steps starting.", "No job has started yet.")
	if strings.Contains(body, "latest") {
		t.Error("the note counts jobs while no job has started")
	}
}

func TestJobPageShowsItsTimeline(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	body := r.pageShows("/jobs/104", `data-status="completed"`, "finished: success", "instance bp-gone1 is terminated: job finished &lt;b&gt;",
		"Not recorded by bullpen yet", `data-live="false"`, "ago · 1 job served")
	events := regexp.MustCompile(`data-event="([a-z]+)"`).FindAllStringSubmatch(body, -1)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e[1])
	}
	if got := strings.Join(kinds, ","); got != "queued,routed,assigned,started,finished,instance" {
		t.Errorf("timeline %s", got)
	}
	if !strings.Contains(r.page("/jobs/102"), `data-live="true"`) {
		t.Error("an assigned job's page is not live")
	}
	for _, p := range []string{"/jobs/999", "/jobs/x", "/jobs/-1", "/nowhere"} {
		if rec := r.get(p); rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
	}
}

// A job shows how it was served as recorded at the claim, whatever its
// instance's role is now: a pool's reusable instance is reuse, a stopped
// member claimed while still warm is hot, one started for the job is
// stopped, and an older row that recorded only "pool" stays pool. Once the
// instance is released for reuse (on-demand now), its job's label and
// timeline do not change.
func TestJobPageShowsHowTheJobWasServedWhenClaimed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := t0.Add(-10 * time.Minute)
	r.storeClk.AdvanceTo(q.Add(time.Second))
	base := domain.Job{RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI", QueuedAt: q, Route: domain.RoutePool,
		Pool: "small-x64", Runner: "small", Status: domain.JobRunning, AssignedAt: q.Add(2 * time.Second), StartedAt: q.Add(4 * time.Second)}
	type served struct {
		id     int64
		in     domain.Instance
		via    domain.Via
		served string
		how    string
	}
	cases := []served{
		{601, domain.Instance{ID: "bp-reused", Role: domain.RoleOnDemand}, domain.ViaReuse, "reuse", "an idle instance back from an earlier job (reuse)"},
		{602, domain.Instance{ID: "bp-warm", Role: domain.RoleStopped}, domain.ViaHot, "hot", "a running member of pool small-x64 (hot)"},
		{603, domain.Instance{ID: "bp-started", Role: domain.RoleStopped}, domain.ViaStopped, "stopped", "a stopped member of pool small-x64, started for it"},
		{604, domain.Instance{ID: "bp-older", Role: domain.RoleHot}, domain.ViaPool, "pool", "a member of pool small-x64 (hot or stopped: not recorded)"},
	}
	for _, c := range cases {
		j := base
		j.ID, j.RunID, j.InstanceID, j.Via = c.id, c.id*10, c.in.ID, c.via
		r.createJobs(j)
	}
	// The instances' rows are newer than the jobs': a member launched
	// after the job was recorded must not pass for a cold start.
	for _, c := range cases {
		in := c.in
		in.CloudID, in.Pool, in.Runner, in.State, in.Job, in.JobStarted = "c-"+in.ID, "small-x64", "small", domain.StateRunning, fmt.Sprint(c.id), true
		r.createInstances(in)
	}
	shows := func(c served) {
		t.Helper()
		body := r.pageShows(fmt.Sprintf("/jobs/%d", c.id), "<dt>served</dt><dd>"+c.served+"</dd>", "assigned to instance "+c.in.ID+", "+c.how)
		if strings.Contains(body, `data-event="launched"`) {
			t.Errorf("job %d: its timeline has the instance launched for it (a cold start)", c.id)
		}
	}
	for _, c := range cases {
		shows(c)
	}
	// The warm member finishes job 602 and is released for reuse.
	if _, err := r.store.TransitionJob(r.ctx, 602, domain.JobGuard{Status: domain.JobRunning}, func(j *domain.Job) {
		j.Status, j.Conclusion, j.CompletedAt = domain.JobCompleted, "success", q.Add(time.Minute)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Transition(r.ctx, "bp-warm", domain.Guard{State: domain.StateRunning, Job: "602"}, func(in *domain.Instance) {
		in.State = domain.StateReleasing
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Transition(r.ctx, "bp-warm", domain.Guard{State: domain.StateReleasing, Job: "602"}, func(in *domain.Instance) {
		in.State, in.Role, in.Job, in.JobStarted = domain.StateReady, domain.RoleOnDemand, "", false
	}); err != nil {
		t.Fatal(err)
	}
	r.later()
	shows(cases[1])
}

func TestInstancesPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.d.cache.history.add(t0.Add(-time.Hour), nil) // an older, empty sample
	r.pageShows("/instances",
		`data-instance="bp-hot1" data-state="ready"`, `data-instance="bp-cold1" data-state="running"`,
		`<section id="ended"`, `data-instance="bp-gone1" data-state="terminated"`, "job finished &lt;b&gt;",
		`<tr data-pool="small-x64">`, `<tr data-pool="">`, `aria-label="Instances by state over the last hours"`,
	)
	one := r.page("/instances?id=bp-stop1")
	if !strings.Contains(one, `data-instance="bp-stop1"`) || strings.Contains(one, `data-instance="bp-hot1"`) {
		t.Error("the id filter does not select one instance")
	}
}

// refuseBadFile records a reload a minute ago refused for its line 6, a
// pool naming a runner the file does not define.
func (r *rig) refuseBadFile() {
	r.t.Helper()
	bad := []byte("runners:\n  small:\n    image: ubuntu\npools:\n  p:\n    runner: nope\n")
	_, err := config.Parse("runs-on.yml", bad)
	if err == nil {
		r.t.Fatal("the bad file parses")
	}
	r.recorder.Refused("runs-on.yml", bad, err, t0.Add(-time.Minute))
}

func TestConfigPageShowsTheFileAndTheRefusedReload(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.refuseBadFile()
	r.pageShows("/config", "The last reload was refused", `<li data-line="6"><strong>line 6, column 13</strong>`,
		"<pre>    runner: nope</pre>", `<span id="L4" class="line"><span class="ln">4</span>    ram: 1</span>`,
		"small-x64: runner small, env any, tz Europe/Paris")
	r.recorder.Refused("runs-on.yml", nil, errors.New("open runs-on.yml: permission denied"), t0)
	if body := r.page("/config"); !strings.Contains(body, "open runs-on.yml: permission denied") {
		t.Error("an unreadable file is not reported")
	}
	r.recorder.Loaded("runs-on.yml", []byte(testConfig), r.cfg, t0)
	if body := r.page("/config"); strings.Contains(body, "refused") {
		t.Error("a successful reload leaves the refusal shown")
	}
}

// A viewer sees what the configuration does, not its text: a file may hold
// scripts bullpen ignores (a RunsOn image's preinstall:) and what they
// embed. The problems of a refused file are listed by line without it.
func TestTheConfigPageShowsTheFileToAdminsOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.refuseBadFile()
	rec := r.do(httptest.NewRequest(http.MethodGet, "/config", nil), "Bearer "+viewerToken)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "ram: 1") || strings.Contains(body, "runner: nope") ||
		!strings.Contains(body, `<li data-line="6"><strong>line 6, column 13</strong>`) ||
		!strings.Contains(body, "small-x64: runner small, env any, tz Europe/Paris") || !strings.Contains(body, "admins only") {
		t.Errorf("a viewer's configuration page (%d):\n%s", rec.Code, body)
	}
}

// A store that stops answering: the last snapshot is shown with a warning;
// with none, a 503.
func TestStoreFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.page("/")
	r.store.Close()
	r.later()
	rec := r.get("/jobs")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "The store did not answer; this is what it held at") {
		t.Errorf("stale page: %d", rec.Code)
	}
	fresh := newRig(t)
	fresh.store.Close()
	if rec := fresh.get("/"); rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "closed") {
		t.Errorf("no snapshot at all: %d %s", rec.Code, rec.Body)
	}
}

func TestGauges(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	want := `
# HELP bullpen_pool_ready_instances Instances that count toward each pool's target, by role: hot ones running idle, stopped ones parked.
# TYPE bullpen_pool_ready_instances gauge
bullpen_pool_ready_instances{pool="burst",role="hot"} 0
bullpen_pool_ready_instances{pool="burst",role="stopped"} 0
bullpen_pool_ready_instances{pool="small-x64",role="hot"} 1
bullpen_pool_ready_instances{pool="small-x64",role="stopped"} 2
# HELP bullpen_pool_target_instances Instances each pool should hold, by role, as the converger's last cycle over the pool recorded it.
# TYPE bullpen_pool_target_instances gauge
bullpen_pool_target_instances{pool="small-x64",role="hot"} 1
bullpen_pool_target_instances{pool="small-x64",role="stopped"} 2
# HELP bullpen_jobs Jobs waiting for a runner or holding one, by status (queued, assigned, running), and jobs held for an approval (held), which wait for a reviewer.
# TYPE bullpen_jobs gauge
bullpen_jobs{status="assigned"} 1
bullpen_jobs{status="held"} 0
bullpen_jobs{status="queued"} 1
bullpen_jobs{status="running"} 1
# HELP bullpen_job_oldest_queued_seconds How long the oldest job not yet started (queued, or assigned to an instance whose runner has not taken it) has waited since GitHub queued it, by pool (empty: the launch queue); 0 when none waits.
# TYPE bullpen_job_oldest_queued_seconds gauge
bullpen_job_oldest_queued_seconds{pool="burst"} 0
bullpen_job_oldest_queued_seconds{pool="small-x64"} 600
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "bullpen_pool_ready_instances",
		"bullpen_pool_target_instances", "bullpen_jobs", "bullpen_job_oldest_queued_seconds"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(r.reg, "bullpen_instances"); err != nil || n != 3 {
		t.Errorf("%d instance series (%v), want 3: pool ready, pool stopped, on-demand running; terminated left out", n, err)
	}
}

// The target gauge is read from the shared store, so a replica that does
// not run the converger (any more) exports the target the converger holding
// the lease recorded last, not one of its own left from when it held it.
func TestTargetGaugeIsTheTargetTheStoreHolds(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	targets := func(hot, stopped int) string {
		return fmt.Sprintf(`
# HELP bullpen_pool_target_instances Instances each pool should hold, by role, as the converger's last cycle over the pool recorded it.
# TYPE bullpen_pool_target_instances gauge
bullpen_pool_target_instances{pool="small-x64",role="hot"} %d
bullpen_pool_target_instances{pool="small-x64",role="stopped"} %d
`, hot, stopped)
	}
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(targets(1, 2)), "bullpen_pool_target_instances"); err != nil {
		t.Fatalf("by day: %v", err)
	}
	// The converger, on whichever replica holds its lease, enters the
	// night schedule.
	if err := r.store.PutPoolStatus(r.ctx, domain.PoolStatus{Name: "small-x64", Schedule: "nights",
		Target: domain.Target{Stopped: 2}, LastCycle: t0}); err != nil {
		t.Fatal(err)
	}
	r.later()
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(targets(0, 2)), "bullpen_pool_target_instances"); err != nil {
		t.Errorf("at night: %v", err)
	}
}

func TestFragmentsAreTheContentAlone(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.Header.Set("X-Fragment", "1")
	rec := r.do(req, "Bearer "+viewerToken)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "<html") || !strings.HasPrefix(body, "<h1>Jobs") {
		t.Errorf("fragment: %d %.80s", rec.Code, body)
	}
	if rec.Header().Get("X-Content-Version") == "" || rec.Header().Get("X-Server-Now") == "" {
		t.Errorf("fragment headers %v", rec.Header())
	}
}

// A viewer who goes away while the shared snapshot is read does not make
// it a store failure that every other viewer is shown until the next read.
func TestAViewerWhoLeavesMidReadDoesNotFailTheSnapshot(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // gone before the store answered
	left := httptest.NewRequest(http.MethodGet, "/jobs", nil).WithContext(ctx)
	r.do(left, "Bearer "+adminToken)
	if rec := r.get("/jobs"); rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "did not answer") {
		t.Fatalf("the next viewer got %d, stale %t", rec.Code, strings.Contains(rec.Body.String(), "did not answer"))
	}
	if warns := r.logs.Lines("level=WARN", "read the store"); len(warns) != 0 {
		t.Fatalf("a store failure was logged: %q", warns)
	}
}

// The jobs page's oldest wait is the gauge's: queued jobs not held for an
// approval and assigned jobs not started, from when GitHub queued them.
func TestJobsPageOldestWaitIsTheGauges(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed() // jobs 101 (queued) and 102 (assigned) queued 10 min ago
	base := domain.Job{RunAttempt: 1, Repo: "acme/app", Name: "deploy", Workflow: "CD", Route: domain.RoutePool, Pool: "small-x64", Runner: "small"}
	held, assigned := base, base
	held.ID, held.RunID, held.QueuedAt, held.Status, held.Reason = 301, 3010, t0.Add(-30*time.Minute), domain.JobQueued, domain.ReasonWaitingForApproval
	assigned.ID, assigned.RunID, assigned.QueuedAt = 302, 3020, t0.Add(-20*time.Minute)
	assigned.Status, assigned.InstanceID, assigned.Via, assigned.AssignedAt = domain.JobAssigned, "bp-stop1", domain.ViaPool, t0.Add(-19*time.Minute)
	r.createJobs(held, assigned)
	r.pageShows("/jobs", `<dd id="oldest-wait"><span data-since="2026-11-24T08:40:00Z">20m00s</span></dd>`,
		`<dt>awaiting approval</dt><dd>1</dd>`, `data-job="301" data-status="queued"`, `queued</span> (approval)`)
	if got := r.oldestWait()["small-x64"]; got != 20*60 {
		t.Errorf("gauge: oldest wait %v s, want 1200", got)
	}
}

// More live instances than the page lists: the rows are sorted before the
// cut, so an instance in error is listed, however new.
func TestInstancesPageListsAnInstanceInErrorPastTheCut(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var insts []domain.Instance
	for k := range maxInstanceRows + 20 {
		insts = append(insts, domain.Instance{ID: fmt.Sprintf("bp-run%03d", k), CloudID: fmt.Sprintf("c%d", k), Role: domain.RoleOnDemand,
			Runner: "small", State: domain.StateRunning, Job: fmt.Sprint(1000 + k)})
	}
	if err := r.store.CreateInstances(r.ctx, insts); err != nil {
		t.Fatal(err)
	}
	r.storeClk.Advance(time.Minute)
	r.createInstances(domain.Instance{ID: "bp-broken", CloudID: "cb", Pool: "small-x64", Role: domain.RoleHot, Runner: "small",
		State: domain.StateError, Reason: "agent failed"})
	body := r.pageShows("/instances", `data-instance="bp-broken" data-state="error"`, "and 21 more")
	if n := count(body, `data-state="running"`); n != maxInstanceRows-1 {
		t.Errorf("%d running rows, want %d", n, maxInstanceRows-1)
	}
}

// Recently finished lists jobs by when they finished, latest first, not by
// when they were recorded, and says which jobs it covers.
func TestRecentlyFinishedIsInOrderOfCompletion(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed() // job 104 finished 5 min after it was queued, 10 min ago
	q := t0.Add(-10 * time.Minute)
	r.createJobs(domain.Job{ID: 401, RunID: 4010, RunAttempt: 1, Repo: "acme/app", Name: "lint", QueuedAt: q, Route: domain.RoutePool,
		Pool: "small-x64", Runner: "small", Status: domain.JobCompleted, InstanceID: "bp-stop1", Via: domain.ViaPool, Conclusion: "success",
		AssignedAt: q.Add(time.Second), StartedAt: q.Add(20 * time.Second), CompletedAt: q.Add(2 * time.Minute)})
	body := r.pageShows("/jobs", `Up to 100 jobs, the most recently finished first, among every job recorded.`)
	recent := body[strings.Index(body, `<section id="recent"`):]
	first, second := strings.Index(recent, `data-job="104"`), strings.Index(recent, `data-job="401"`)
	if first < 0 || second < 0 || first > second {
		t.Errorf("job 104 (finished later, recorded earlier) at %d, job 401 at %d: want 104 first", first, second)
	}
}

// A file that could not be read is not a file that did not validate; the
// page says which, and writes times to the second.
func TestConfigPageTellsAnUnreadableFileFromAnInvalidOne(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	at := t0.Add(-90*time.Second + 123456789*time.Nanosecond)
	r.recorder.Refused("runs-on.yml", nil, errors.New("open runs-on.yml: no such file or directory"), at)
	body := r.pageShows("/config", "The file could not be read",
		`Since <time datetime="2026-11-24T08:58:30.123456789Z">2026-11-24 08:58:30 UTC</time> reading the file has failed`,
		"open runs-on.yml: no such file or directory",
		`<time datetime="2026-11-24T07:00:00Z">2026-11-24 07:00:00 UTC</time>`)
	if strings.Contains(body, "did not validate") || strings.Contains(body, "was refused") {
		t.Error("an unreadable file is said not to validate")
	}
	r.recorder.Refused("runs-on.yml", []byte{}, errors.New("the file is empty"), at)
	r.later()
	if body := r.page("/config"); !strings.Contains(body, "did not validate") || strings.Contains(body, "could not be read") {
		t.Error("an empty file read is said to be unreadable")
	}
}
