package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bullpen-ci/bullpen/internal/loop"
)

// Handler is the control plane's whole HTTP surface, for one address.
func (a *App) Handler() http.Handler {
	h, _ := a.Handlers(false)
	return h
}

// Handlers is the control plane's HTTP surface. Not split, public serves
// every path and admin is nil. Split, public serves what must be reachable
// from beyond the operator's network (GitHub's deliveries, the agents'
// API, and a load balancer's readiness check that says whether this
// process takes them and nothing else), and admin serves the operator's surfaces: the status API,
// the dashboard, the metrics and the full health report, which names the
// loops and the store's error. Each answers the other's paths with a plain
// 404 that does not say where they are served, but for the status API's on
// the public address, where a client pointed at the wrong address is told
// the setting to look up.
func (a *App) Handlers(split bool) (public, admin http.Handler) {
	if !split {
		mux := http.NewServeMux()
		a.mountOutside(mux)
		a.mountOperator(mux)
		return mux, nil
	}
	pub := http.NewServeMux()
	a.mountOutside(pub)
	pub.HandleFunc("GET /healthz", a.bareHealth)
	pub.HandleFunc("/healthz", onlyGet)
	pub.HandleFunc("/api", apiNotServedHere)
	pub.HandleFunc("/api/", apiNotServedHere)
	// Without it, an unknown path would get the mux's "404 page not
	// found", which reads as a missing page rather than a missing surface.
	pub.HandleFunc("/", notServedHere)
	adm := http.NewServeMux()
	a.mountOperator(adm)
	// Else they would fall through to the dashboard's HTML "not found".
	adm.HandleFunc("/webhook", notServedHere)
	adm.HandleFunc("/agent/v1/", notServedHere)
	return pub, adm
}

// mountOutside serves on mux the paths that GitHub and the machines'
// agents call.
func (a *App) mountOutside(mux *http.ServeMux) {
	mux.Handle("/webhook", a.Webhook)
	mux.Handle("/agent/v1/", a.AgentAPI)
}

// mountOperator serves on mux the operator's paths: the status API, the
// metrics, the health report and the dashboard, which takes every path
// no other route does.
func (a *App) mountOperator(mux *http.ServeMux) {
	a.API.Mount(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", a.health)
	// Without these, another method on a probe's path falls through to the
	// dashboard, whose HTML "not found" misleads whoever set up the probe.
	mux.HandleFunc("/metrics", onlyGet)
	mux.HandleFunc("/healthz", onlyGet)
	mux.Handle("/", a.Dashboard)
}

// onlyGet answers a request to a path served to GET alone.
func onlyGet(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, fmt.Sprintf("%s %s: this path answers GET and HEAD only", r.Method, r.URL.Path), http.StatusMethodNotAllowed)
}

// notServedHere answers a path that this address does not serve.
func notServedHere(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("%s: not served on this address", r.URL.Path), http.StatusNotFound)
}

// apiNotServedHere answers a status API path on the public address in the
// API's JSON error shape, so that a client pointed at the wrong address
// (bullpen status with its default server) says where to turn. It names
// the setting, not the address, which is the operators' to tell.
func apiNotServedHere(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{fmt.Sprintf("%s: the status API is not served on this address but on the operators' address (--admin-listen)", r.URL.Path)})
}

// Drain answers at once what the HTTP surface holds open, agents' long
// polls and the dashboard's event streams, so that a server shutting down
// need not wait for them.
func (a *App) Drain() {
	a.AgentAPI.Drain()
	a.Dashboard.Drain()
}

// healthy is whether the store answers and no loop keeps failing, and the
// store's error when it does not answer.
func (a *App) healthy(ctx context.Context) (bool, error) {
	_, err := a.Store.ListPoolStatus(ctx)
	return err == nil && a.Loops.Healthy(), err
}

// health answers 200 when the store answers and no loop keeps failing, 503
// otherwise or once a shutdown has started (the one health check of a
// server on one address is also its load balancer's), with each loop's
// status and why the store does not answer.
func (a *App) health(w http.ResponseWriter, r *http.Request) {
	ok, err := a.healthy(r.Context())
	status, store, storeErr := http.StatusOK, "ok", ""
	if err != nil {
		store, storeErr = "unavailable", err.Error()
	}
	draining := a.draining.Load()
	if !ok || draining {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Store      string        `json:"store"`
		StoreError string        `json:"store_error,omitempty"`
		Draining   bool          `json:"draining,omitempty"`
		Loops      []loop.Status `json:"loops"`
	}{store, storeErr, draining, a.Loops.Statuses()})
}

// Draining tells the public health check that the process is shutting
// down, so that a load balancer stops sending it webhooks and agents
// while it still serves them: serve calls it as soon as shutdown starts,
// before the loops stop and long before the port closes.
func (a *App) Draining() { a.draining.Store(true) }

// bareHealth is the public address's readiness: whether this process
// takes webhooks and agents' calls, which is all a load balancer in front
// of it should judge. It stays 200 while a loop keeps failing or the
// store does not answer (a cloud's or GitHub's outage, which a delivery
// stored or an agent's retry rides out, and which every replica would
// share, so dropping them all would help nothing); those are the admin
// /healthz's, for the operator. It answers 503 from the start of a
// shutdown. It reads nothing, so a probe costs the store nothing, and
// says nothing of the install.
func (a *App) bareHealth(w http.ResponseWriter, r *http.Request) {
	status, word := http.StatusOK, "ok"
	if a.draining.Load() {
		status, word = http.StatusServiceUnavailable, "draining"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Status string `json:"status"`
	}{word})
}
