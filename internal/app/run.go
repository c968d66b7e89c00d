package app

import (
	"context"
	"crypto/rand"
	"os"
	"time"

	"github.com/bullpen-ci/bullpen/internal/converger"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

// Run runs every loop until ctx ends, then waits for each to finish what it
// holds. Its error says what a loop could not carry out (a panic, a last
// flush that failed); failing steps are retried, logged and reported by
// the health endpoint instead.
func (a *App) Run(ctx context.Context) error {
	reports := make(chan converger.Report)
	loops := append(a.jobPath(), a.oneReplica(a.Reconciler.Loop()), a.oneReplica(a.Converger.Loop(reports)), a.Dashboard.Loop(), loop.Loop{Name: "reports",
		Step: func(ctx context.Context) error {
			select {
			case r := <-reports:
				a.NoteCycle(r)
			case <-ctx.Done():
			}
			return nil
		}})
	if a.source != nil {
		loops = append(loops, a.configLoop())
	}
	a.noteConfig(a.Config(), "configuration in force")
	if gen := a.simulatedJobs(); gen != nil {
		gen.Start()
		defer gen.Stop()
	}
	return a.Loops.Run(ctx, loops...)
}

// simulatedJobs is the simulated GitHub's stream of jobs for the pools
// served now, nil when none is asked for.
func (a *App) simulatedJobs() *ghsim.Generator {
	if a.Sim.GitHub == nil || a.opts.SimJobsPerMinute <= 0 {
		return nil
	}
	a.opts.Log.Info("the simulated GitHub queues jobs", "per_minute", a.opts.SimJobsPerMinute)
	return ghsim.NewGenerator(a.Sim.GitHub, a.opts.Clock, ghsim.GeneratorOptions{
		Seed: a.opts.SimSeed, PerMinute: a.opts.SimJobsPerMinute, Mix: ghsim.MixFor(a.pools(), intake.EnvLabel(a.opts.Environment)),
		MinDuration: time.Minute, MaxDuration: 3 * time.Minute,
	})
}

// RunJobPath runs only the loops that serve jobs (intake, pool dispatch,
// provisioning, terminator, heartbeats): pools keep what they hold. The
// benchmark uses it so that its figures are the job path's alone.
func (a *App) RunJobPath(ctx context.Context) error { return a.Loops.Run(ctx, a.jobPath()...) }

// NoteCycle records what a converger cycle found (the demo's step driver
// runs cycles itself).
func (a *App) NoteCycle(r converger.Report) {
	a.specHashes.note(r)
	if a.opts.OnCycle != nil {
		a.opts.OnCycle(r)
	}
}

// jobPath is the loops that serve jobs: every replica runs them (the
// terminator excepted, which runs on one at a time).
func (a *App) jobPath() []loop.Loop {
	loops := []loop.Loop{a.Intake.Loop(), a.Dispatcher.Loop(), a.Provisioner.Loop(), a.oneReplica(a.Terminator.Loop()), a.Agents.Loop()}
	if a.opts.AgentRecheck > 0 {
		loops = append(loops, a.AgentAPI.RecheckLoop())
	}
	return loops
}

// oneReplica makes l run on one replica at a time, under a lease of
// LeasePeriod (at least twice its interval).
func (a *App) oneReplica(l loop.Loop) loop.Loop {
	return a.Exclusive.Wrap(l, a.leaseTTL(l.Every))
}

// leaseTTL is the lease of a one-replica loop stepping every interval.
func (a *App) leaseTTL(every time.Duration) time.Duration {
	return max(a.opts.LeasePeriod, 2*every)
}

// defaultReplicaID names a replica by its host and a random suffix, so
// that two on one host differ.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "bullpen"
	}
	return host + "-" + rand.Text()[:6]
}

// configLoop re-reads the configuration every ConfigInterval.
func (a *App) configLoop() loop.Loop {
	return loop.Loop{Name: "config", Every: a.opts.ConfigInterval, Step: a.reloadConfig}
}
