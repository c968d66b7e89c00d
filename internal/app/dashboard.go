package app

import (
	"github.com/bullpen-ci/bullpen/internal/dashboard"
)

// wireDashboard builds the web dashboard on the store port, with the pools,
// the configuration in force (as newConfigSource and the reloads record
// it) and the autoscaler's decisions of this app.
func (a *App) wireDashboard() error {
	o := a.opts
	var err error
	a.Dashboard, err = dashboard.New(dashboard.Options{
		Store: a.Store, Clock: o.Clock, Log: o.Log.With("loop", "dashboard"),
		AdminToken: o.AdminToken, ViewerToken: o.ViewerToken, Environment: o.Environment,
		Pools: a.pools, Config: a.configs.Status, Autoscale: a.lastDecision, Registry: o.Registry,
		Limiter: a.authLimiter,
	})
	return err
}

// lastDecision is a pool autoscaler's last decision, for the dashboard.
func (a *App) lastDecision(pool string) (dashboard.Decision, bool) {
	d, ok := a.Scaler.Last(pool, a.opts.Clock.Now())
	if !ok || d.Action == "" {
		return dashboard.Decision{}, false
	}
	return dashboard.Decision{Action: d.Action, Count: d.New, Score: d.Score, Reason: d.Reason}, true
}
