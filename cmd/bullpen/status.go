package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/intake"
)

func init() {
	register("status", "print the pools and jobs of a running control plane (from its status API)", cmdStatus)
}

func cmdStatus(ctx context.Context, e *env, args []string) int {
	fs := e.flags("status")
	server := cmp.Or(e.getenv("BULLPEN_SERVER"), "http://127.0.0.1:8080")
	fs.StringVar(&server, "server", server, "base URL of bullpen serve ($BULLPEN_SERVER)")
	var tokenFile string
	adminToken.defineFile(fs, &tokenFile, "file holding the admin token (else $BULLPEN_ADMIN_TOKEN)")
	recent := fs.Int("jobs", 200, "how many of the latest jobs to summarise (1..1000)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on the server after this long")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	token, err := adminToken.resolve(e.getenv, "", tokenFile)
	if err == nil && token == "" {
		err = adminToken.missing()
	}
	if err == nil && (*recent < 1 || *recent > 1000) {
		err = fmt.Errorf("--jobs %d: want 1..1000", *recent)
	}
	if u, perr := url.Parse(server); err == nil && (perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		err = fmt.Errorf("--server %q: want http://HOST:PORT or https://…", server)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen status:", err)
		return 2
	}
	c := &statusClient{base: strings.TrimRight(server, "/"), token: token, http: &http.Client{Timeout: *timeout}}
	var pools struct{ Pools []api.PoolView }
	var latest struct{ Jobs []api.JobView }
	err = c.get(ctx, "/api/v1/pools", &pools)
	var active []api.JobView
	var more bool
	if err == nil {
		active, more, err = c.activeJobs(ctx)
	}
	if err == nil {
		err = c.get(ctx, fmt.Sprintf("/api/v1/jobs?limit=%d", *recent), &latest)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen status:", err)
		return 1
	}
	printStatus(e.stdout, server, e.clock(), pools.Pools, active, more, latest.Jobs)
	return 0
}

// activeJobs lists the jobs waiting for a runner or holding one, the
// oldest first, page after page (next) up to activeListed of them: the
// counts of a backlog longer than a page are then whole. more says that
// the listing stopped there.
func (c *statusClient) activeJobs(ctx context.Context) (jobs []api.JobView, more bool, err error) {
	path := fmt.Sprintf("/api/v1/jobs?status=queued,assigned,running&order=oldest&limit=%d", api.MaxLimit)
	after := ""
	for len(jobs) < activeListed {
		var page struct {
			Jobs []api.JobView
			Next string
		}
		q := path
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		if err := c.get(ctx, q, &page); err != nil {
			return nil, false, err
		}
		jobs = append(jobs, page.Jobs...)
		if after = page.Next; after == "" {
			return jobs, false, nil
		}
	}
	return jobs, true, nil
}

type statusClient struct {
	base, token string
	http        *http.Client
}

func (c *statusClient) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, cmp.Or(e.Error, bodyExcerpt(body), "no message"))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("GET %s: not the status API's answer: %w", path, err)
	}
	return nil
}

// bodyExcerpt is an error answer that is not the API's, for the message:
// whatever answered instead (another address's plain 404, a proxy's page)
// is best told by what it said. It is put on one line and cut short.
func bodyExcerpt(body []byte) string {
	const most = 200
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(body), "?")), " ")
	if r := []rune(s); len(r) > most {
		s = string(r[:most]) + "…"
	}
	return s
}

// printStatus writes the pools as the demo's table, then the jobs: what
// waits and runs, and how the latest were served. A pool the converger has
// not cycled yet has no target to be at, and says so.
func printStatus(w io.Writer, server string, now time.Time, pools []api.PoolView, active []api.JobView, more bool, latest []api.JobView) {
	fmt.Fprintf(w, "bullpen at %s, %s\n\n", server, now.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(w, "  %-14s %-17s %-9s %-9s %-8s %-8s %-17s %s\n", "pool", "schedule", "hot", "stopped", "warming", "serving",
		"last cycle", "next change")
	var problems []string
	for _, p := range pools {
		mark, hot, stopped, cycle := " ", fmt.Sprintf("%d/-", p.Counts["ready_hot"]), fmt.Sprintf("%d/-", p.Counts["stopped"]), "not converged yet"
		if p.Target != nil && p.LastCycle != nil {
			if p.Counts["ready_hot"] == p.Target.Hot && p.Counts["stopped"] == p.Target.Stopped && p.Counts["warming"] == 0 {
				mark = "✓"
			}
			hot, stopped = fmt.Sprintf("%d/%d", p.Counts["ready_hot"], p.Target.Hot), fmt.Sprintf("%d/%d", p.Counts["stopped"], p.Target.Stopped)
			cycle = max(now.Sub(*p.LastCycle), 0).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(w, "%s %-14s %-17s %-9s %-9s %-8d %-8d %-17s %s\n", mark, p.Name, cmp.Or(p.Schedule, "(none)"),
			hot, stopped, p.Counts["warming"], p.Counts["detached"], cycle, nextChange(p, now))
		if p.LastError != "" {
			problems = append(problems, fmt.Sprintf("  ! %s: %s", p.Name, clean(p.LastError)))
		}
	}
	if len(pools) == 0 {
		fmt.Fprintln(w, "  (no pool configured for this environment)")
	}
	for _, l := range problems {
		fmt.Fprintln(w, l)
	}
	printJobs(w, now, active, more, latest)
}

func nextChange(p api.PoolView, now time.Time) string {
	if p.NextChange == nil {
		return "-"
	}
	at := *p.NextChange
	if loc, err := time.LoadLocation(cmp.Or(p.Timezone, "UTC")); err == nil {
		at = at.In(loc)
	}
	in := p.NextChange.Sub(now).Round(time.Minute)
	return fmt.Sprintf("%s in %dh%02dm (%s)", cmp.Or(p.NextSchedule, "(none)"), int(in.Hours()), int(in.Minutes())%60, at.Format("Mon 15:04 MST"))
}

// activeListed is how many active jobs status reads at the most, ten
// pages: beyond, the counts say they stop there.
const activeListed = 10 * api.MaxLimit

func printJobs(w io.Writer, now time.Time, active []api.JobView, more bool, latest []api.JobView) {
	counts := map[string]int{}
	held := 0
	var oldest time.Time
	for _, j := range active {
		if j.Status == "queued" && j.Reason == intake.ReasonWaiting {
			held++ // it waits for a person, not for a runner
			continue
		}
		counts[j.Status]++
		// An assigned job waits too until its runner takes it.
		waiting := (j.Status == "queued" || j.Status == "assigned") && j.StartedAt == nil
		if waiting && j.QueuedAt != nil && (oldest.IsZero() || j.QueuedAt.Before(oldest)) {
			oldest = *j.QueuedAt
		}
	}
	fmt.Fprintf(w, "\njobs: %d queued, %d assigned, %d running, %d held for approval\n",
		counts["queued"], counts["assigned"], counts["running"], held)
	if !oldest.IsZero() {
		fmt.Fprintf(w, "  the oldest waiting for a runner has waited %s\n", max(now.Sub(oldest), 0).Round(time.Second))
	}
	if more {
		fmt.Fprintf(w, "  (the oldest %d active jobs only: there are more, and newer)\n", len(active))
	}
	byVia := map[string][]time.Duration{}
	var rejected []api.JobView
	done := 0
	for _, j := range latest {
		switch {
		case j.Status == "rejected":
			rejected = append(rejected, j)
		case j.Status == "completed":
			done++
		}
		if j.QueuedAt != nil && j.StartedAt != nil && j.Via != "" {
			byVia[j.Via] = append(byVia[j.Via], max(j.StartedAt.Sub(*j.QueuedAt), 0))
		}
	}
	if len(byVia) == 0 {
		fmt.Fprintf(w, "of the latest %d: %d completed, %d rejected; none started yet, so no queue times\n", len(latest), done, len(rejected))
	} else {
		fmt.Fprintf(w, "of the latest %d: %d completed, %d rejected; queue time (queued → started) by how they were served:\n",
			len(latest), done, len(rejected))
	}
	for _, via := range []string{"hot", "stopped", "pool", "reuse", "cold"} {
		ds := byVia[via]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		at := func(q float64) float64 { return ds[int(q*float64(len(ds)-1)+0.5)].Seconds() }
		fmt.Fprintf(w, "  %-6s %3d jobs   p50 %5.1fs   p90 %5.1fs   max %5.1fs\n", via, len(ds), at(0.5), at(0.9), at(1))
	}
	for k, j := range rejected {
		if k == 0 {
			fmt.Fprintln(w, "rejected lately:")
		}
		if k == 5 {
			fmt.Fprintf(w, "  and %d more\n", len(rejected)-k)
			break
		}
		fmt.Fprintf(w, "  %d  %s  %s\n", j.ID, clean(j.Repo), clean(j.Reason))
	}
}

// clean keeps what a webhook sent from driving the terminal: control
// characters (escape sequences included) are dropped.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}
