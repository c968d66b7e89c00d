package dashboard

import (
	"cmp"
	"net/http"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// poolCard is one pool on the pools page.
type poolCard struct {
	domain.Pool
	Zone      string
	Entry     string // the schedule entry in force (+autoscale when raised)
	Target    domain.Target
	Counts    rebalance.Counts // what it holds now
	AtTarget  bool
	Next      *nextChange
	Autoscale *autoscaleView
	Queue     queueStats // of its recent jobs
	Spark     svgChart
	Week      svgChart
	LastCycle time.Time
	LastError string
}

type nextChange struct {
	At     time.Time
	Local  string // the instant on the pool's wall clock
	Entry  string
	Target domain.Target
}

type autoscaleView struct {
	Decision
	Threshold float64
	Max       int
}

type poolsView struct {
	Pools       []poolCard
	AllAtTarget bool
}

func (d *Dashboard) poolsPage(r *http.Request, s *snapshot) (pageResult, error) {
	now := d.opts.Clock.Now()
	members := map[string][]domain.Instance{}
	for _, in := range s.instances {
		if in.Pool != "" && in.State != domain.StateTerminated {
			members[in.Pool] = append(members[in.Pool], in)
		}
	}
	started := startedByPool(s.recent)
	v := poolsView{AllAtTarget: true}
	for _, p := range d.opts.Pools() {
		c := d.poolCard(p, now, s, members[p.Name], started[p.Name])
		v.AllAtTarget = v.AllAtTarget && c.AtTarget
		v.Pools = append(v.Pools, c)
	}
	v.AllAtTarget = v.AllAtTarget && len(v.Pools) > 0
	return pageResult{Title: "Pools", Data: v, Live: true}, nil
}

func (d *Dashboard) poolCard(p domain.Pool, now time.Time, s *snapshot, members []domain.Instance, started []domain.Job) poolCard {
	c := poolCard{Pool: p, Zone: zoneName(p), Counts: rebalance.Count(members)}
	res := schedule.Resolve(p, now)
	c.Entry, c.Target = res.Entry, res.Target
	if st, ok := s.statuses[p.Name]; ok {
		// The converger's view carries the autoscaler's raise.
		c.Entry, c.Target, c.LastCycle, c.LastError = st.Schedule, st.Target, st.LastCycle, st.LastError
	}
	c.AtTarget = c.Counts.ReadyHot == c.Target.Hot && c.Counts.Stopped == c.Target.Stopped && c.Counts.Warming == 0
	if at, ok := schedule.NextChange(p, now, 7*24*time.Hour); ok {
		next := schedule.Resolve(p, at)
		c.Next = &nextChange{At: at, Local: at.In(location(p)).Format("Mon 15:04 MST"), Entry: next.Entry, Target: next.Target}
	}
	if p.Autoscale != nil && d.opts.Autoscale != nil {
		if dec, ok := d.opts.Autoscale(p.Name); ok && dec.Action != "" {
			c.Autoscale = &autoscaleView{Decision: dec, Threshold: p.Autoscale.BreachThreshold, Max: p.Autoscale.Max}
		}
	}
	c.Queue = queueStatsOf(started)
	c.Spark = sparkline(started, 40)
	c.Week = weekChart(p, now)
	return c
}

// startedByPool groups the jobs that started by pool, newest first.
func startedByPool(recent []domain.Job) map[string][]domain.Job {
	out := map[string][]domain.Job{}
	for _, j := range recent {
		if j.Pool != "" && !j.StartedAt.IsZero() && !j.QueuedAt.IsZero() {
			out[j.Pool] = append(out[j.Pool], j)
		}
	}
	return out
}

// queueStats summarise queue times (queued → started).
type queueStats struct {
	N             int
	P50, P90, Max time.Duration
}

func queueStatsOf(jobs []domain.Job) queueStats {
	var ds []time.Duration
	for _, j := range jobs {
		if q, ok := queueTime(j); ok {
			ds = append(ds, q)
		}
	}
	return statsOf(ds)
}

func statsOf(ds []time.Duration) queueStats {
	if len(ds) == 0 {
		return queueStats{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1)+0.5)] }
	return queueStats{N: len(ds), P50: at(0.5), P90: at(0.9), Max: ds[len(ds)-1]}
}

// queueTime is how long a job waited for its runner: from GitHub queuing
// it to its steps starting.
func queueTime(j domain.Job) (time.Duration, bool) {
	if j.QueuedAt.IsZero() || j.StartedAt.IsZero() {
		return 0, false
	}
	return max(j.StartedAt.Sub(j.QueuedAt), 0), true
}

func location(p domain.Pool) *time.Location {
	if p.Location == nil {
		return time.UTC
	}
	return p.Location
}

func zoneName(p domain.Pool) string { return cmp.Or(p.Timezone, "UTC") }

func sortedStatuses(m map[string]domain.PoolStatus) []domain.PoolStatus {
	out := make([]domain.PoolStatus, 0, len(m))
	for _, st := range m {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b domain.PoolStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
