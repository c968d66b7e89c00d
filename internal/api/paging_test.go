package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// page is one answer of a listing: its rows' ids, and next, which is nil
// when the answer has none.
type page struct {
	ids  []string
	next *string
}

// getPage requests path, wants 200, and reads the list under key and next.
func (r *rig) getPage(path, key string) page {
	r.t.Helper()
	var body map[string]json.RawMessage
	r.getJSON(path, &body)
	var list []map[string]any
	if err := json.Unmarshal(body[key], &list); err != nil || list == nil {
		r.t.Fatalf("GET %s: %s is not a list (%v)", path, key, err)
	}
	p := page{ids: ids(list)}
	if raw, ok := body["next"]; ok {
		var next string
		if err := json.Unmarshal(raw, &next); err != nil || next == "" {
			r.t.Fatalf("GET %s: next %s, want a cursor or none", path, raw)
		}
		p.next = &next
	}
	return p
}

// walk follows next from path's first page until an answer has none, and
// returns the ids listed, in order. Each page holds at most limit rows;
// only a full page may carry next.
func (r *rig) walk(path, key string, limit int) []string {
	r.t.Helper()
	var out []string
	query := path
	for n := 1; ; n++ {
		p := r.getPage(query, key)
		if len(p.ids) > limit {
			r.t.Fatalf("GET %s: %d rows, over the limit of %d", query, len(p.ids), limit)
		}
		out = append(out, p.ids...)
		if p.next == nil {
			return out
		}
		if len(p.ids) < limit {
			r.t.Fatalf("GET %s: %d rows of %d and a next: a short page is the last", query, len(p.ids), limit)
		}
		if n > 100 {
			r.t.Fatalf("GET %s: the pages do not end", path)
		}
		query = path + "&after=" + url.QueryEscape(*p.next)
	}
}

// moreJobs creates jobs from id first on, count of them, three to a batch
// sharing a creation time, a second apart; every third is completed.
func (r *rig) moreJobs(first int64, count int) {
	r.t.Helper()
	var jobs []domain.Job
	for id := first; id < first+int64(count); id++ {
		j := domain.Job{ID: id, RunID: id * 10, RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI",
			Status: domain.JobQueued, Pool: "small-x64"}
		if id%3 == 0 {
			j.Status = domain.JobCompleted
		}
		jobs = append(jobs, j)
	}
	for _, batch := range domain.Chunk(jobs, 3) {
		if _, err := r.store.CreateJobs(r.ctx, batch); err != nil {
			r.t.Fatal(err)
		}
		r.clk.Advance(time.Second)
	}
}

// Following next page by page lists what one answer of every row lists,
// in the same order, each row once: newest first and oldest, filtered or
// not, with rows sharing a creation time split across pages.
func TestListsAreReadPageByPageThroughNext(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.moreJobs(201, 20)
	for i := range 10 {
		in := domain.Instance{ID: fmt.Sprintf("old-%02d", i), Pool: "small-x64", Role: domain.RoleHot, Runner: "small-x64",
			State: domain.StateTerminated}
		if i%2 == 0 {
			in.State = domain.StateReady
		}
		if err := r.store.CreateInstances(r.ctx, []domain.Instance{in}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			r.clk.Advance(time.Second)
		}
	}
	cases := []struct {
		key, query string
		limit      int
	}{
		{"jobs", "", 4},
		{"jobs", "order=oldest", 4},
		{"jobs", "order=newest", 1},
		{"jobs", "status=completed&pool=small-x64", 2},
		{"jobs", "status=queued&order=oldest", 3},
		{"jobs", "", 25}, // every job on one page
		{"instances", "all=1", 3},
		{"instances", "", 2},
		{"instances", "pool=small-x64&state=terminated", 2},
	}
	for _, c := range cases {
		path := "/api/v1/" + c.key + "?" + c.query
		want := r.getPage(path+"&limit=1000", c.key).ids
		if len(want) <= c.limit && c.limit != 25 {
			t.Fatalf("%s: %d rows, want more than a page of %d", path, len(want), c.limit)
		}
		if got := r.walk(fmt.Sprintf("%s&limit=%d", path, c.limit), c.key, c.limit); !slices.Equal(got, want) {
			t.Errorf("%s in pages of %d: %v, want %v", path, c.limit, got, want)
		}
	}
}

// A page that does not fill its limit is the last and carries no next; a
// full one carries next, which leads to the rest of the listing, or to an
// empty page with no next when there is none.
func TestNextIsGivenOnlyOnAFullPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if p := r.getPage("/api/v1/jobs?limit=6", "jobs"); p.next != nil || len(p.ids) != 5 {
		t.Errorf("5 jobs in a page of 6: %v, next %v; want every job and no next", p.ids, p.next)
	}
	if p := r.getPage("/api/v1/jobs", "jobs"); p.next != nil {
		t.Errorf("5 jobs in a page of 100 carries next %q", *p.next)
	}
	full := r.getPage("/api/v1/jobs?limit=5", "jobs")
	if full.next == nil {
		t.Fatalf("5 jobs in a page of 5: no next")
	}
	if p := r.getPage("/api/v1/jobs?limit=5&after="+*full.next, "jobs"); len(p.ids) != 0 || p.next != nil {
		t.Errorf("the page after the last: %v, next %v; want no job and no next", p.ids, p.next)
	}
	// Jobs created since are listed after a page read oldest first, and
	// not after one read newest first, which had the newest already.
	first := r.getPage("/api/v1/jobs?order=oldest&limit=2", "jobs")
	newest := r.getPage("/api/v1/jobs?limit=2", "jobs")
	r.moreJobs(301, 2)
	if p := r.getPage("/api/v1/jobs?order=oldest&limit=10&after="+*first.next, "jobs"); !slices.Equal(p.ids,
		[]string{"103", "104", "105", "301", "302"}) {
		t.Errorf("oldest first, after jobs created: %v", p.ids)
	}
	if p := r.getPage("/api/v1/jobs?limit=10&after="+*newest.next, "jobs"); !slices.Equal(p.ids, []string{"103", "102", "101"}) {
		t.Errorf("newest first, after jobs created: %v", p.ids)
	}
}

// A cursor is the last row's position and the order, and nothing else:
// neither the filters nor anything the row does not show.
func TestNextCarriesThePositionAlone(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, c := range []struct {
		path, key, order string
		id               any
		created          time.Time
	}{
		{"/api/v1/jobs?pool=small-x64&status=assigned,completed&limit=1", "jobs", "newest", 104.0, t0.Add(3 * time.Second)},
		{"/api/v1/jobs?order=oldest&instance=c-1&limit=1", "jobs", "oldest", 102.0, t0.Add(time.Second)},
		{"/api/v1/instances?pool=small-x64&runner=small-x64&limit=1", "instances", "newest", "i-3", t0.Add(7 * time.Second)},
	} {
		p := r.getPage(c.path, c.key)
		if p.next == nil {
			t.Fatalf("%s: no next", c.path)
		}
		raw, err := base64.RawURLEncoding.DecodeString(*p.next)
		if err != nil {
			t.Fatalf("%s: next %q: %v", c.path, *p.next, err)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: next %s: %v", c.path, raw, err)
		}
		want := map[string]any{"order": c.order, "id": c.id, "created_at": c.created.Format(time.RFC3339Nano)}
		if !slices.Equal(keys(got), keys(want)) {
			t.Errorf("%s: next holds %v, want only %v", c.path, keys(got), keys(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: next's %s = %#v, want %#v", c.path, k, got[k], v)
			}
		}
	}
}

// A cursor that does not decode, or that continues a listing in another
// order, is a 400 naming the problem, never a 500.
func TestAfterRefusesACursorItCannotFollow(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	next := func(path, key string) string {
		p := r.getPage(path, key)
		if p.next == nil {
			t.Fatalf("%s: no next", path)
		}
		return *p.next
	}
	newestJob := next("/api/v1/jobs?limit=1", "jobs")
	oldestJob := next("/api/v1/jobs?order=oldest&limit=1", "jobs")
	instance := next("/api/v1/instances?limit=1", "instances")
	notOurs := []string{"bad after", "not a cursor of this listing"}
	cases := []struct {
		path  string
		parts []string
	}{
		{"/api/v1/jobs?after=", notOurs},
		{"/api/v1/jobs?after=%25%25%25", notOurs},
		{"/api/v1/jobs?after=abc", notOurs},
		{"/api/v1/jobs?after=" + enc("not json"), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"2026-06-01T09:00:00Z","id":101,"pool":"x"}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","id":101}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"yesterday","id":101}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"0000-01-01T00:00:00Z","id":101}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"0001-01-01T00:00:00Z","id":101}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"2026-06-01T09:00:00Z"}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"sideways","created_at":"2026-06-01T09:00:00Z","id":101}`), notOurs},
		{"/api/v1/jobs?after=" + enc(`{"order":"newest","created_at":"2026-06-01T09:00:00Z","id":101}{}`), notOurs},
		{"/api/v1/jobs?after=" + instance, notOurs},
		{"/api/v1/instances?after=" + newestJob, notOurs},
		{"/api/v1/instances?after=" + enc("[]"), notOurs},
		{"/api/v1/jobs?order=oldest&after=" + newestJob, []string{"bad after", "newest first", "oldest first"}},
		{"/api/v1/jobs?after=" + oldestJob, []string{"bad after", "oldest first", "newest first"}},
		{"/api/v1/instances?after=" + enc(`{"order":"oldest","created_at":"2026-06-01T09:00:00Z","id":"i-1"}`),
			[]string{"bad after", "oldest first", "newest first"}},
		{"/api/v1/jobs?after=" + newestJob + "&after=" + newestJob, []string{`parameter "after" given 2 times`}},
	}
	for _, c := range cases {
		rec := r.get(c.path)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", c.path, rec.Code, rec.Body)
			continue
		}
		r.wantError(rec, http.StatusBadRequest, c.parts...)
		if strings.Contains(rec.Body.String(), "see the server log") {
			t.Errorf("GET %s: %s", c.path, rec.Body)
		}
	}
	// The cursors themselves are followed.
	r.wantIDs("/api/v1/jobs?limit=2&after="+newestJob, "jobs", []string{"104", "103"})
	r.wantIDs("/api/v1/jobs?order=oldest&limit=2&after="+oldestJob, "jobs", []string{"102", "103"})
	r.wantIDs("/api/v1/instances?after="+instance, "instances", []string{"i-2", "i-1"})
}
