package dashboard

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
)

// collector exports what the pages show as gauges, from the same snapshot
// (so a scrape costs at most one snapshot per interval too): what each pool
// holds against its target, instances by state, jobs waiting and running,
// and the oldest wait. The alert rules in deploy/ are written on them.
//
// Every replica reads the same shared store, so every replica exports the
// same values, whichever holds the converger's lease: the target comes from
// the pool status the converger records, not from the converger's memory,
// which a replica that lost the lease would keep showing frozen.
type collector struct {
	d                                                    *Dashboard
	ready, target, instances, jobs, oldest, queries, age *prometheus.Desc
}

const (
	// scrapeWait bounds how long a scrape waits for a snapshot being read:
	// a slow store must not make the scrape outlast Prometheus' timeout (10 s
	// by default), which would lose every metric of this replica and report
	// it down. Past it the scrape serves the snapshot in hand.
	scrapeWait = 3 * time.Second
	// staleGaugesAfter is the oldest snapshot the gauges are served from.
	// While the store answers, the one in hand is at most a minute (the
	// dashboard loop reads one every sampleEvery, and each scrape starts a
	// read once the interval has passed) plus one read (snapshotTimeout)
	// old; an older one means the read in progress is stuck, and the gauges
	// are then left out as when the store fails.
	staleGaugesAfter = 2 * time.Minute
)

// jobsHeld is the status bullpen_jobs counts jobs held for an approval
// under: they wait for a reviewer, for days sometimes, not for a runner,
// and counted as queued they would hide how many jobs lack a runner.
const jobsHeld = "held"

// jobGaugeStatuses are the status values of bullpen_jobs, each served even
// at 0.
var jobGaugeStatuses = []string{string(domain.JobQueued), jobsHeld, string(domain.JobAssigned), string(domain.JobRunning)}

func newCollector(d *Dashboard) *collector {
	return &collector{d: d,
		ready: prometheus.NewDesc("bullpen_pool_ready_instances",
			"Instances that count toward each pool's target, by role: hot ones running idle, stopped ones parked.",
			[]string{"pool", "role"}, nil),
		target: prometheus.NewDesc("bullpen_pool_target_instances",
			"Instances each pool should hold, by role, as the converger's last cycle over the pool recorded it.",
			[]string{"pool", "role"}, nil),
		instances: prometheus.NewDesc("bullpen_instances",
			"Instances by pool (empty for those launched for jobs outside pools) and state; terminated ones are left out.",
			[]string{"pool", "state"}, nil),
		jobs: prometheus.NewDesc("bullpen_jobs",
			"Jobs waiting for a runner or holding one, by status (queued, assigned, running), and jobs held for an approval (held), which wait for a reviewer.",
			[]string{"status"}, nil),
		oldest: prometheus.NewDesc("bullpen_job_oldest_queued_seconds",
			"How long the oldest job not yet started (queued, or assigned to an instance whose runner has not taken it) has waited since GitHub queued it, by pool (empty: the launch queue); 0 when none waits.",
			[]string{"pool"}, nil),
		queries: prometheus.NewDesc("bullpen_dashboard_store_queries_total",
			"Store queries made for the dashboard, its event streams and these gauges.", nil, nil),
		age: prometheus.NewDesc("bullpen_dashboard_snapshot_age_seconds",
			fmt.Sprintf("How old the store snapshot behind the dashboard's gauges is at this scrape; the other gauges are left out while the store fails, or once it is older than %.0f s.",
				staleGaugesAfter.Seconds()),
			nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.target, c.instances, c.jobs, c.oldest, c.queries, c.age} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.queries, prometheus.CounterValue, float64(c.d.cache.queries.Load()))
	reading, s, err := c.d.cache.refresh()
	if reading != nil {
		timeUp, stop := clock.Closes(c.d.opts.Clock, scrapeWait)
		select {
		case <-reading:
		case <-timeUp:
		}
		stop()
		s, err = c.d.cache.current()
	}
	if s == nil {
		return
	}
	now := c.d.opts.Clock.Now()
	age := max(now.Sub(s.at), 0)
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age.Seconds())
	if err != nil || age > staleGaugesAfter {
		// No gauges rather than old ones: an alert must not hold on data
		// the store no longer confirms.
		return
	}
	c.collectPools(ch, s)
	type key struct{ pool, state string }
	counts := map[key]int{}
	for _, in := range s.instances {
		if in.State != domain.StateTerminated {
			counts[key{in.Pool, string(in.State)}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(n), k.pool, k.state)
	}
	byStatus := map[string]int{}
	oldest := map[string]time.Time{}
	for _, p := range c.d.opts.Pools() {
		oldest[p.Name] = time.Time{}
	}
	for _, j := range s.active {
		status := string(j.Status)
		if j.HeldForApproval() {
			status = jobsHeld
		}
		byStatus[status]++
		if since, ok := j.WaitingSince(); ok {
			if t, seen := oldest[j.Pool]; !seen || t.IsZero() || since.Before(t) {
				oldest[j.Pool] = since
			}
		}
	}
	for _, st := range jobGaugeStatuses {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(byStatus[st]), st)
	}
	for pool, t := range oldest {
		wait := 0.0
		if !t.IsZero() {
			wait = max(now.Sub(t).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, wait, pool)
	}
}

// collectPools exports, for every configured pool, what counts toward its
// target (ready hot and parked stopped members) and, once the converger has
// recorded one, the target itself: the alert rules compare the two.
func (c *collector) collectPools(ch chan<- prometheus.Metric, s *snapshot) {
	members := map[string][]domain.Instance{}
	for _, in := range s.instances {
		if in.Pool != "" {
			members[in.Pool] = append(members[in.Pool], in)
		}
	}
	for _, p := range c.d.opts.Pools() {
		n := rebalance.Count(members[p.Name])
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(n.ReadyHot), p.Name, string(domain.RoleHot))
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(n.Stopped), p.Name, string(domain.RoleStopped))
		if st, ok := s.statuses[p.Name]; ok {
			ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(st.Target.Hot), p.Name, string(domain.RoleHot))
			ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(st.Target.Stopped), p.Name, string(domain.RoleStopped))
		}
	}
}
