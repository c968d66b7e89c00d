package dashboard

import (
	"net/http"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Limits of the lists of the jobs page; the counts above them are exact.
const (
	maxActiveRows   = 200
	maxRecentRows   = 100
	maxRejectedRows = 50
)

// jobRow is a job as the lists show it.
type jobRow struct {
	domain.Job
	Served     string // hot, stopped, reuse, cold (pool on older rows); "" before it has an instance
	Queue      time.Duration
	HasQueue   bool
	Run        time.Duration
	HasRun     bool
	WaitingFor time.Time // since GitHub queued it
	Approval   bool      // GitHub holds it for an approval
}

type jobsView struct {
	Pool                      string // the filter; "" for all
	Pools                     []string
	Queued, Assigned, Running int
	Approval                  int // queued, held by GitHub for an approval
	// OldestWaiting is when the job that has waited longest for a runner
	// was queued (see domain.Job.WaitingSince); zero when none waits.
	OldestWaiting            time.Time
	Active, Recent, Rejected []jobRow
	MoreActive               int
	// RecentSince is when the oldest job the snapshot holds was recorded:
	// the recent list covers the jobs recorded since. Zero when the
	// snapshot holds every job.
	RecentSince time.Time
	// Charted is how many jobs the queue-time chart shows: the latest that
	// started, running or finished, since a job's queue time is known once
	// it starts.
	Charted    int
	QueueChart svgChart
}

func (d *Dashboard) jobsPage(r *http.Request, s *snapshot) (pageResult, error) {
	v := jobsView{Pool: r.URL.Query().Get("pool")}
	for _, p := range d.opts.Pools() {
		v.Pools = append(v.Pools, p.Name)
	}
	keep := func(j domain.Job) bool { return v.Pool == "" || j.Pool == v.Pool }
	for _, j := range s.active {
		if !keep(j) {
			continue
		}
		if since, ok := j.WaitingSince(); ok && (v.OldestWaiting.IsZero() || since.Before(v.OldestWaiting)) {
			v.OldestWaiting = since
		}
		switch {
		case j.HeldForApproval():
			v.Approval++
		case j.Status == domain.JobQueued:
			v.Queued++
		case j.Status == domain.JobAssigned:
			v.Assigned++
		case j.Status == domain.JobRunning:
			v.Running++
		}
		if len(v.Active) < maxActiveRows {
			v.Active = append(v.Active, rowOf(j))
		} else {
			v.MoreActive++
		}
	}
	var started, finished []domain.Job
	for _, j := range s.recent {
		if !keep(j) {
			continue
		}
		if _, ok := queueTime(j); ok {
			started = append(started, j)
		}
		switch j.Status {
		case domain.JobCompleted:
			finished = append(finished, j)
		case domain.JobRejected:
			if len(v.Rejected) < maxRejectedRows {
				v.Rejected = append(v.Rejected, rowOf(j))
			}
		}
	}
	// The snapshot holds the newest jobs by when they were recorded; the
	// list shows those that finished last, so it is sorted before the cut.
	slices.SortStableFunc(finished, func(a, b domain.Job) int { return b.CompletedAt.Compare(a.CompletedAt) })
	for _, j := range finished[:min(len(finished), maxRecentRows)] {
		v.Recent = append(v.Recent, rowOf(j))
	}
	if len(s.recent) >= recentJobs {
		v.RecentSince = s.recent[len(s.recent)-1].CreatedAt
	}
	by := byPath(started)
	for _, ds := range by {
		v.Charted += len(ds)
	}
	v.QueueChart = queueChart(by)
	return pageResult{Title: "Jobs", Data: v, Live: true}, nil
}

func rowOf(j domain.Job) jobRow {
	r := jobRow{Job: j, Served: served(j), WaitingFor: j.QueuedAt, Approval: j.HeldForApproval()}
	r.Queue, r.HasQueue = queueTime(j)
	if !j.StartedAt.IsZero() && !j.CompletedAt.IsZero() {
		r.Run, r.HasRun = max(j.CompletedAt.Sub(j.StartedAt), 0), true
	}
	return r
}

// served says how a job got its instance, as recorded when it was claimed:
// a pool's hot or stopped member, reuse, or a cold start; pool for jobs
// recorded before hot and stopped were told apart.
func served(j domain.Job) string {
	switch j.Via {
	case domain.ViaHot, domain.ViaStopped, domain.ViaPool, domain.ViaReuse, domain.ViaCold:
		return string(j.Via)
	}
	return ""
}

// paths are the ways a job is served, in the order charts show them.
var paths = []string{"hot", "stopped", "pool", "reuse", "cold"}

// byPath groups queue times by how the jobs were served.
func byPath(jobs []domain.Job) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, j := range jobs {
		if q, ok := queueTime(j); ok {
			p := served(j)
			if p == "" {
				continue
			}
			out[p] = append(out[p], q)
		}
	}
	for _, ds := range out {
		slices.Sort(ds)
	}
	return out
}
