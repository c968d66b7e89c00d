package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// JobsReport sums up the jobs the demo fed: how many reached each status,
// and how long they waited from queued to started, by how they were served.
type JobsReport struct {
	Total    int            `json:"total"`
	ByStatus map[string]int `json:"by_status"`
	// QueueTimes are by how jobs were served: pool (a pool's member),
	// reuse (an instance back from a job, a pool's own included), cold;
	// and the pool members' jobs again by how the member was claimed:
	// running (hot) or stopped and started for the job (stopped). Jobs
	// recorded before the two were told apart count only under pool.
	QueueTimes map[string]Latencies `json:"queue_time_seconds"`
	// QueueTime is every served job's; ByPool the pool jobs', by pool.
	QueueTime Latencies            `json:"queue_time_all_seconds"`
	ByPool    map[string]Latencies `json:"queue_time_by_pool_seconds,omitempty"`
	// ByHour is the served jobs' queue times by the hour of the week they
	// were queued in ("Mon 09", in UTC).
	ByHour map[string]Latencies `json:"queue_time_by_hour_seconds,omitempty"`
	// ByPoolHour is the pool jobs' queue times by pool and by the hour of
	// the week they were queued in.
	ByPoolHour map[string]map[string]Latencies `json:"queue_time_by_pool_and_hour_seconds,omitempty"`
	// NotStarted counts the jobs that have no queue time, by status:
	// still queued, assigned to a machine whose runner has not taken them
	// yet, rejected, or completed before they started (cancelled).
	NotStarted map[string]int `json:"not_started,omitempty"`
	// Unserved counts the rejected jobs by their labels (joined by ",",
	// the run id of a runs-on label written <run>), with the reason of the
	// first: labels no pool or runner serves.
	Unserved map[string]Unserved `json:"unserved,omitempty"`
}

// Unserved is a set of labels whose jobs were rejected.
type Unserved struct {
	Jobs   int    `json:"jobs"`
	Reason string `json:"reason"`
}

// Latencies are percentiles of a set of durations, in seconds.
type Latencies struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// jobsReport sums up the jobs the store holds.
func (w *world) jobsReport(ctx context.Context) (JobsReport, error) {
	list, err := w.a.Store.ListJobs(ctx, domain.JobFilter{})
	if err != nil {
		return JobsReport{}, fmt.Errorf("demo: read jobs: %w", err)
	}
	r := JobsReport{Total: len(list), ByStatus: map[string]int{}, QueueTimes: map[string]Latencies{}}
	waits := newQueueWaits()
	for _, j := range list {
		r.ByStatus[string(j.Status)]++
		if j.Status == domain.JobRejected {
			r.unserved(j)
		}
		if !waits.add(j) {
			if r.NotStarted == nil {
				r.NotStarted = map[string]int{}
			}
			r.NotStarted[string(j.Status)]++
		}
	}
	waits.summarize(&r)
	return r, nil
}

// queueWaits gathers the served jobs' queue times, in seconds, in the
// groups a JobsReport gives percentiles of.
type queueWaits struct {
	// byVia is by how jobs were served, a pool member's jobs both under
	// pool and under hot or stopped.
	byVia, byPool, byHour map[string][]float64
	byPoolHour            map[string]map[string][]float64
	all                   []float64
}

func newQueueWaits() *queueWaits {
	return &queueWaits{
		byVia: map[string][]float64{}, byPool: map[string][]float64{}, byHour: map[string][]float64{},
		byPoolHour: map[string]map[string][]float64{},
	}
}

// add counts the job's queue time if it was served, and says whether it
// was.
func (q *queueWaits) add(j domain.Job) bool {
	if j.Via == "" || j.StartedAt.IsZero() || j.QueuedAt.IsZero() {
		return false
	}
	wait := j.StartedAt.Sub(j.QueuedAt).Seconds()
	q.byVia[string(j.Via)] = append(q.byVia[string(j.Via)], wait)
	if j.Via.PoolMember() && j.Via != domain.ViaPool {
		q.byVia[string(domain.ViaPool)] = append(q.byVia[string(domain.ViaPool)], wait)
	}
	q.all = append(q.all, wait)
	hour := j.QueuedAt.UTC().Format("Mon 15")
	q.byHour[hour] = append(q.byHour[hour], wait)
	if j.Pool != "" {
		q.byPool[j.Pool] = append(q.byPool[j.Pool], wait)
		if q.byPoolHour[j.Pool] == nil {
			q.byPoolHour[j.Pool] = map[string][]float64{}
		}
		q.byPoolHour[j.Pool][hour] = append(q.byPoolHour[j.Pool][hour], wait)
	}
	return true
}

// summarize sets the report's queue-time percentiles, leaving the optional
// groups nil when they have no jobs.
func (q *queueWaits) summarize(r *JobsReport) {
	for pool, hours := range q.byPoolHour {
		if r.ByPoolHour == nil {
			r.ByPoolHour = map[string]map[string]Latencies{}
		}
		r.ByPoolHour[pool] = map[string]Latencies{}
		for hour, ws := range hours {
			r.ByPoolHour[pool][hour] = latencies(ws)
		}
	}
	for hour, ws := range q.byHour {
		if r.ByHour == nil {
			r.ByHour = map[string]Latencies{}
		}
		r.ByHour[hour] = latencies(ws)
	}
	for via, ws := range q.byVia {
		r.QueueTimes[via] = latencies(ws)
	}
	if len(q.all) > 0 {
		r.QueueTime = latencies(q.all)
	}
	for pool, ws := range q.byPool {
		if r.ByPool == nil {
			r.ByPool = map[string]Latencies{}
		}
		r.ByPool[pool] = latencies(ws)
	}
}

func (r *JobsReport) unserved(j domain.Job) {
	if r.Unserved == nil {
		r.Unserved = map[string]Unserved{}
	}
	labels := make([]string, len(j.Labels))
	for i, l := range j.Labels {
		labels[i] = withoutRunID(l)
	}
	key := strings.Join(labels, ",")
	u := r.Unserved[key]
	u.Jobs++
	if u.Reason == "" {
		u.Reason = j.Reason
	}
	r.Unserved[key] = u
}

// withoutRunID writes the run id of a runs-on=RUN_ID/… label as <run>, so
// that the jobs of every run asking for the same thing count together.
func withoutRunID(label string) string {
	rest, ok := strings.CutPrefix(label, "runs-on=")
	if !ok {
		return label
	}
	id, tail, ok := strings.Cut(rest, "/")
	if !ok || id == "" || strings.Trim(id, "0123456789") != "" {
		return label
	}
	return "runs-on=<run>/" + tail
}

// LatenciesOf are the percentiles of durations in seconds (at least one).
func LatenciesOf(seconds []float64) Latencies { return latencies(slices.Clone(seconds)) }

func latencies(ws []float64) Latencies {
	slices.Sort(ws)
	at := func(p float64) float64 {
		i := int(p*float64(len(ws))+0.5) - 1
		return round1(ws[min(max(i, 0), len(ws)-1)])
	}
	return Latencies{Count: len(ws), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: round1(ws[len(ws)-1])}
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

// jobLine is the per-cycle jobs summary: "jobs: 3 queued · 2 assigned ·
// 4 running · 11 done (pool 7, reuse 2, cold 2)".
func (w *world) jobLine(ctx context.Context) string {
	r, err := w.jobsReport(ctx)
	if err != nil || r.Total == 0 {
		return ""
	}
	var parts []string
	for _, st := range domain.JobStatuses {
		if n := r.ByStatus[string(st)]; n > 0 {
			label := string(st)
			if st == domain.JobCompleted {
				label = "done"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, label))
		}
	}
	var via []string
	for _, v := range []domain.Via{domain.ViaPool, domain.ViaReuse, domain.ViaCold} {
		if l, ok := r.QueueTimes[string(v)]; ok {
			via = append(via, fmt.Sprintf("%s %d", v, l.Count))
		}
	}
	line := "jobs: " + strings.Join(parts, " · ")
	if len(via) > 0 {
		line += "  (started via " + strings.Join(via, ", ") + ")"
	}
	return line
}

// queueTimeSummary renders the final queue-time table.
func queueTimeSummary(r JobsReport) []string {
	var out []string
	for _, v := range []domain.Via{domain.ViaPool, domain.ViaReuse, domain.ViaCold} {
		l, ok := r.QueueTimes[string(v)]
		if !ok {
			continue
		}
		out = append(out, fmt.Sprintf("  %-6s %3d jobs   p50 %5.1fs   p90 %5.1fs   max %5.1fs", v, l.Count, l.P50, l.P90, l.Max))
	}
	if line := notStartedLine(r.NotStarted); line != "" {
		out = append(out, line)
	}
	return out
}

// notStartedLine accounts for the jobs fed that the queue-time rows leave
// out, so that the rows add up to the jobs fed: "not started: 1 queued,
// 2 rejected". It is "" when every job started.
func notStartedLine(byStatus map[string]int) string {
	var parts []string
	for _, st := range domain.JobStatuses {
		n := byStatus[string(st)]
		if n == 0 {
			continue
		}
		switch st {
		case domain.JobAssigned:
			parts = append(parts, fmt.Sprintf("%d waiting for their runner", n))
		case domain.JobCompleted:
			parts = append(parts, fmt.Sprintf("%d ended before starting", n))
		default:
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "  not started: " + strings.Join(parts, ", ")
}
