package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/autoscale/appplatform"
)

func init() {
	register("autoscale", "demand autoscaler: run it on an App Platform worker, or replay a trace", cmdAutoscale)
}

func autoscaleUsage(w io.Writer) {
	fmt.Fprint(w, `usage: bullpen autoscale SUBCOMMAND [flags]

subcommands:
  run      scale a DigitalOcean App Platform worker with GitHub job demand,
           configured by the autoscaler's environment variables (GITHUB_TOKEN,
           DO_API_TOKEN, APP_ID, OWNER and REPO or ORG, WORKER_NAME,
           RUNNER_NAME_PREFIX, DEAD_RUNNER_CLEANUP, MIN_INSTANCES, ...); runs
           until interrupted
  replay   replay a CSV trace of t,demand through the decision:
           bullpen autoscale replay --trace FILE [--initial N]

Run 'bullpen autoscale SUBCOMMAND -h' for its flags.
`)
}

func cmdAutoscale(ctx context.Context, e *env, args []string) int {
	return dispatch(ctx, e, "autoscale", args, autoscaleUsage, map[string]subcommand{
		"run": autoscaleRun,
		"replay": func(_ context.Context, e *env, args []string) int {
			return autoscale.ReplayMain(args, e.getenv, e.stdin, e.stdout, e.stderr)
		},
	})
}

// autoscaleRun is `bullpen autoscale run`: exit 0 when interrupted, 1 when
// the configuration is wrong (every problem named), 2 for a usage error.
func autoscaleRun(ctx context.Context, e *env, args []string) int {
	fs := e.flags("bullpen autoscale run")
	str := func(name, envName, def, usage string) *string {
		if v := e.getenv(envName); v != "" {
			def = v
		}
		return fs.String(name, def, usage+" ($"+envName+")")
	}
	logLevel := str("log-level", "BULLPEN_LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := str("log-format", "BULLPEN_LOG_FORMAT", "text", "text or json")
	metricsAddr := str("metrics-listen", "BULLPEN_METRICS_LISTEN", "", "HTTP address for /metrics and /healthz; empty: none")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bullpen autoscale run [flags]\n\nConfigured by the autoscaler's environment variables; see internal/autoscale/appplatform/README.md (the scaling rules: internal/autoscale/README.md).\n/healthz answers 503 with the reason after %d failed cycles in a row, ok again after a cycle that succeeds.\n\n", appplatform.UnhealthyAfter)
		fs.PrintDefaults()
	}
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	log, err := newLogger(e, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen autoscale run:", err)
		return 2
	}
	cfg, ok := autoscaleConfig(e)
	if !ok {
		return 1
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	health := &appplatform.Health{}
	scaler, err := appplatform.New(cfg, appplatform.Deps{Log: log, Registerer: reg, OnCycle: health.Observe})
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen autoscale run:", err)
		return 1
	}
	if *metricsAddr != "" {
		stop, err := serveAutoscaleMetrics(*metricsAddr, autoscaleMux(reg, health), log)
		if err != nil {
			fmt.Fprintln(e.stderr, "bullpen autoscale run:", err)
			return 1
		}
		defer stop()
	}
	if err := scaler.Run(ctx); err != nil {
		log.Error("autoscaler stopped", "err", err)
		return 1
	}
	return 0
}

// autoscaleConfig reads the environment, or prints every problem with it.
func autoscaleConfig(e *env) (appplatform.Config, bool) {
	cfg, err := appplatform.ConfigFromEnv(e.getenv)
	if err == nil {
		return cfg, true
	}
	var cerr *appplatform.ConfigError
	if !errors.As(err, &cerr) {
		fmt.Fprintln(e.stderr, "bullpen autoscale run:", err)
		return cfg, false
	}
	fmt.Fprintln(e.stderr, "bullpen autoscale run: invalid configuration:")
	for _, p := range cerr.Problems {
		fmt.Fprintln(e.stderr, "  "+p)
	}
	return cfg, false
}

// autoscaleMux serves /metrics, and /healthz from the cycles' outcomes: a
// process whose every cycle fails (a revoked token, an app deleted) is not
// healthy, however alive it is.
func autoscaleMux(reg *prometheus.Registry, health *appplatform.Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", health)
	return mux
}

// serveAutoscaleMetrics serves h until stop is called.
func serveAutoscaleMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
