// Package dashboard is bullpen's web dashboard: pools, jobs, instances and
// the configuration in force, served by `bullpen serve` at / from embedded
// templates, CSS and a little JavaScript, and kept live with server-sent
// events.
//
// Every page is drawn from one shared snapshot of the store (four queries),
// read at most once per refresh interval however many pages are open; a
// page learns through /events that the snapshot changed and fetches its
// new content, which is rendered from the snapshot without a query.
//
// It reads and never writes, so it needs no CSRF protection; an action
// added later must bring it (the session cookie is SameSite=Strict, which
// is not enough on its own).
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Store is what the dashboard reads of the store: list and get, nothing else.
type Store interface {
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error)
}

// Decision is a pool autoscaler's last decision.
type Decision struct {
	Action string  // up, down or none
	Count  int     // the hot count it asked for
	Score  float64 // breach score of the direction breached; 0 without a breach
	Reason string
}

// Options configure the dashboard. Store, Clock and AdminToken are required.
type Options struct {
	Store Store
	Clock domain.Clock
	Log   *slog.Logger // nil: slog.Default()
	// AdminToken signs in through the login form; ViewerToken, when set,
	// does too, as a read-only viewer. Either also works as a bearer token.
	AdminToken, ViewerToken string
	Environment             string
	// Pools returns the configured pools of this environment, in file order.
	Pools func() []domain.Pool
	// Config returns the configuration in force; nil shows none.
	Config func() ConfigStatus
	// Autoscale returns a pool's last autoscaler decision; nil, or false,
	// shows none.
	Autoscale func(pool string) (Decision, bool)
	// Refresh is the least time between two reads of the store; default
	// DefaultRefresh.
	Refresh time.Duration
	// SessionTTL is how long a login lasts; default DefaultSessionTTL.
	SessionTTL time.Duration
	// Registry receives the dashboard's gauges (pools, instances, jobs,
	// from the same snapshot); nil registers none.
	Registry prometheus.Registerer
	// Limiter throttles addresses that offer too many wrong tokens, at the
	// login form and as bearer tokens, and counts the refusals; shared with
	// the status API, which checks the admin token too. Nil throttles and
	// counts nothing.
	Limiter *httpauth.Limiter
}

// Defaults.
const (
	// DefaultRefresh keeps live updates under one store query per second in
	// total: a snapshot costs snapshotQueries queries.
	DefaultRefresh    = 5 * time.Second
	DefaultSessionTTL = 12 * time.Hour
	// sampleEvery is how often Loop samples instances by state for the
	// chart of the last hours, whether or not anyone is looking.
	sampleEvery = time.Minute
)

// Dashboard serves the pages.
type Dashboard struct {
	opts    Options
	log     *slog.Logger
	cache   *cache
	auth    *auth
	hub     *hub
	pages   map[string]*pageTemplate
	handler http.Handler
}

// New builds the dashboard; nothing runs until its handler is served.
func New(o Options) (*Dashboard, error) {
	var problems []error
	if o.Store == nil {
		problems = append(problems, errors.New("no store"))
	}
	if o.Clock == nil {
		problems = append(problems, errors.New("no clock"))
	}
	if o.AdminToken == "" {
		problems = append(problems, errors.New("no admin token"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Pools == nil {
		o.Pools = func() []domain.Pool { return nil }
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d := &Dashboard{opts: o, log: o.Log, pages: pages,
		cache: newCache(o.Store, o.Clock, o.Refresh, o.Log),
		auth:  newAuth(o.AdminToken, o.ViewerToken, o.SessionTTL, o.Clock),
	}
	d.auth.limiter = o.Limiter
	d.hub = newHub(d.cache, o.Clock, o.Refresh)
	d.hub.version = d.version
	if err := promreg.Register(o.Registry, "dashboard", newCollector(d)); err != nil {
		return nil, err
	}
	d.handler = d.routes()
	return d, nil
}

// ServeHTTP serves the dashboard's routes.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.handler.ServeHTTP(w, r) }

// Loop samples instances by state once a minute (one snapshot, shared with
// the pages), so that the chart of the last hours has no gaps while nobody
// looks.
func (d *Dashboard) Loop() loop.Loop {
	return loop.Loop{Name: "dashboard", Every: sampleEvery, Step: func(ctx context.Context) error {
		_, err := d.cache.get(ctx)
		return err
	}}
}

// Drain ends every open event stream: an http.Server's Shutdown waits for
// open requests, and a stream would otherwise last until its client leaves.
func (d *Dashboard) Drain() { d.hub.drain() }

// StoreQueries reports how many store queries the dashboard has made.
func (d *Dashboard) StoreQueries() int64 { return d.cache.queries.Load() }

func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", assetHandler())
	mux.HandleFunc("GET /login", d.loginPage)
	mux.HandleFunc("POST /login", d.login)
	mux.HandleFunc("POST /logout", d.logout)
	mux.Handle("GET /{$}", d.page("pools", d.poolsPage))
	mux.Handle("GET /jobs", d.page("jobs", d.jobsPage))
	mux.Handle("GET /jobs/{id}", d.page("job", d.jobPage))
	mux.Handle("GET /instances", d.page("instances", d.instancesPage))
	mux.Handle("GET /config", d.page("config", d.configPage))
	mux.Handle("GET /events", d.requireSession(http.HandlerFunc(d.events)))
	mux.HandleFunc("/", d.notFound)
	return securityHeaders(mux)
}

// securityHeaders keep every response out of frames and caches and allow
// scripts and styles from this origin only: even a value that escaped
// escaping could not run.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}
