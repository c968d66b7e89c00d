package rest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// pageSize makes every list of more than two records paginate.
const pageSize = 2

func TestListRunnersFollowsEveryPage(t *testing.T) {
	srv := newServer(t)
	srv.PageSize(pageSize)
	for _, s := range []domain.Scope{{Owner: "acme"}, {Owner: "acme", Repo: "app"}} {
		var want []int64
		for i := range 7 {
			want = append(want, srv.AddRunner(fakegh.RunnerSpec{Scope: s, Name: fmt.Sprintf("%s-%d", s, i), Labels: []string{"linux"}, Online: i%2 == 0}))
		}
		runners, err := newClient(t, srv).ListRunners(t.Context(), s)
		if err != nil {
			t.Fatalf("ListRunners(%s): %v", s, err)
		}
		var got []int64
		for _, r := range runners {
			got = append(got, r.ID)
			if !slices.Contains(r.Labels, "self-hosted") || !slices.Contains(r.Labels, "linux") {
				t.Errorf("runner %d labels %q", r.ID, r.Labels)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListRunners(%s) = %v, want %v", s, got, want)
		}
	}
	if n := srv.Count("GET /orgs/{org}/actions/runners"); n != 4 {
		t.Errorf("the organisation's 7 runners took %d requests, want 4 pages", n)
	}
	for _, req := range srv.Requests() {
		if !strings.Contains(req, "per_page=100") {
			t.Errorf("request %q does not ask for 100 records a page", req)
		}
	}
}

// TestListJobsFollowsEveryPage spreads jobs over more runs than a page
// holds and more jobs per run than a page holds, in an organisation with
// more repositories than a page holds.
func TestListJobsFollowsEveryPage(t *testing.T) {
	srv := newServer(t)
	srv.PageSize(pageSize)
	// acme/old is archived: no workflow runs there, whatever its history.
	var queued, running []int64
	for _, repo := range []string{"acme/app", "acme/web", "acme/api", "acme/docs", "acme/old"} {
		q, r := seedRepo(t, srv, repo)
		if repo != "acme/old" {
			queued, running = append(queued, q...), append(running, r...)
		}
	}
	if err := srv.ArchiveRepo("acme/old"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv)
	for _, tc := range []struct {
		status string
		want   []int64
	}{{rest.StatusQueued, queued}, {rest.StatusInProgress, running}} {
		jobs, err := c.ListJobs(t.Context(), domain.Scope{Owner: "acme"}, tc.status)
		if err != nil {
			t.Fatalf("ListJobs(%s): %v", tc.status, err)
		}
		if got := ids(jobs); !slices.Equal(got, sortedIDs(tc.want)) {
			t.Errorf("ListJobs(acme, %s) = %v, want %v", tc.status, got, sortedIDs(tc.want))
		}
		for _, j := range jobs {
			if j.Status != tc.status || j.Repo == "" || j.RunID == 0 || j.CreatedAt.IsZero() {
				t.Errorf("job %+v", j)
			}
			if tc.status == rest.StatusInProgress && !strings.HasPrefix(j.RunnerName, "bullpen-") {
				t.Errorf("job %d in progress on %q", j.ID, j.RunnerName)
			}
		}
	}
	if n := srv.Count("GET /orgs/{org}/repos"); n != 6 {
		t.Errorf("5 repositories took %d requests over two listings, want 3 pages each", n)
	}
}

func mustStart(t *testing.T, srv *fakegh.Server, jobID int64, runner string) {
	t.Helper()
	if err := srv.StartJob(jobID, runner); err != nil {
		t.Fatal(err)
	}
}

// seedRepo queues three runs of one job and a run of five jobs, two of
// them started, and returns the ids of the queued and the started jobs.
func seedRepo(t *testing.T, srv *fakegh.Server, repo string) (queued, running []int64) {
	for range 3 {
		queued = append(queued, srv.QueueJob(repo, []string{"self-hosted"}).ID)
	}
	first := srv.QueueJob(repo, []string{"self-hosted"})
	queued = append(queued, first.ID)
	for i := range 4 {
		j := srv.QueueJob(repo, []string{"self-hosted"}, fakegh.InRun(first.RunID))
		if i < 2 {
			mustStart(t, srv, j.ID, "bullpen-"+repo)
			running = append(running, j.ID)
		} else {
			queued = append(queued, j.ID)
		}
	}
	return queued, running
}

func ids(jobs []domain.GitHubJob) []int64 {
	out := make([]int64, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return sortedIDs(out)
}

func sortedIDs(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// TestPaginationThatNeverEnds stops a listing whose Link header leads back
// to a page already read, instead of looping.
func TestPaginationThatNeverEnds(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?page=2>; rel="next"`, r.Host, r.URL.Path))
		fmt.Fprint(w, `{"total_count":1,"runners":[{"id":1,"name":"r","os":"linux","status":"online","busy":false,"labels":[]}]}`)
	}))
	t.Cleanup(api.Close)
	c, err := rest.New(rest.Options{BaseURL: api.URL, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRunners(t.Context(), domain.Scope{Owner: "acme"}); err == nil || !strings.Contains(err.Error(), "pagination") {
		t.Errorf("ListRunners over circular pages: %v, want a pagination error", err)
	}
}

// ActiveJobs finds what ListJobs finds for both statuses, with each
// repository's runs listed and each run's jobs read once.
func TestActiveJobsListOnceWhatTwoListingsFind(t *testing.T) {
	srv := newServer(t)
	srv.PageSize(pageSize)
	var want []int64
	for _, repo := range []string{"acme/app", "acme/web", "acme/api"} {
		q, r := seedRepo(t, srv, repo)
		want = append(append(want, q...), r...)
	}
	jobs, err := newClient(t, srv).ActiveJobs(t.Context(), domain.Scope{Owner: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(jobs); !slices.Equal(got, sortedIDs(want)) {
		t.Errorf("ActiveJobs(acme) = %v, want %v", got, sortedIDs(want))
	}
	for _, j := range jobs {
		if j.Status != rest.StatusQueued && j.Status != rest.StatusInProgress {
			t.Errorf("job %d is %s", j.ID, j.Status)
		}
	}
	if n := srv.Count("GET /orgs/{org}/repos"); n != 2 {
		t.Errorf("3 repositories took %d requests, want 2 pages: one listing", n)
	}
	// Each repository holds four runs (three of one queued job, one of
	// five jobs over three pages) listed under three run statuses.
	if n := srv.Count("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs"); n != 3*(3+3) {
		t.Errorf("jobs of 12 runs read in %d requests, want %d: each run's pages once", n, 3*(3+3))
	}
}
