package app

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
)

// Handler is the control plane's HTTP surface.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/webhook", a.Webhook)
	mux.Handle("/api/v1/", a.API.Handler())
	mux.Handle("/agent/v1/", a.AgentAPI)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.Store.ListPoolStatus(r.Context()); err != nil {
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// Run runs every loop until ctx ends, then waits for each to return.
func (a *App) Run(ctx context.Context) error {
	reports := make(chan converger.Report)
	loops := append(a.jobPath(), a.Reconciler.Run, func(ctx context.Context) error { return a.Converger.Run(ctx, reports) },
		func(ctx context.Context) error {
			for {
				select {
				case r := <-reports:
					a.noteSpecHashes(r)
					if a.opts.OnCycle != nil {
						a.opts.OnCycle(r)
					}
				case <-ctx.Done():
					return nil
				}
			}
		})
	if a.opts.ConfigPath != "" {
		loops = append(loops, a.watchConfig)
	}
	return a.run(ctx, loops)
}

// RunJobPath runs only the loops that serve jobs (intake, pool dispatch,
// provisioning, terminator): pools keep what they hold. The benchmark uses
// it so that its figures are the job path's alone.
func (a *App) RunJobPath(ctx context.Context) error { return a.run(ctx, a.jobPath()) }

// NoteCycle records what a converger cycle run outside Run found (the demo's
// step driver runs cycles itself).
func (a *App) NoteCycle(r converger.Report) {
	a.noteSpecHashes(r)
	if a.opts.OnCycle != nil {
		a.opts.OnCycle(r)
	}
}

func (a *App) jobPath() []func(context.Context) error {
	return []func(context.Context) error{a.Intake.Run, a.Dispatcher.Run, a.Provisioner.Run, a.Terminator.Run, a.Agents.Run}
}

func (a *App) run(ctx context.Context, loops []func(context.Context) error) error {
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx); err != nil {
				a.opts.Log.Error("loop stopped", "err", err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// watchConfig re-reads the configuration file; a file that does not
// validate is reported and the configuration in force is kept.
func (a *App) watchConfig(ctx context.Context) error {
	last, _ := os.ReadFile(a.opts.ConfigPath)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.opts.Clock.After(a.opts.ConfigInterval):
		}
		data, err := os.ReadFile(a.opts.ConfigPath)
		if err != nil {
			a.opts.Log.Error("configuration unreadable; keeping the one in force", "path", a.opts.ConfigPath, "err", err)
			continue
		}
		if bytes.Equal(data, last) {
			continue
		}
		cfg, err := config.Parse(a.opts.ConfigPath, data)
		if err != nil {
			a.opts.Log.Error("configuration invalid; keeping the one in force", "path", a.opts.ConfigPath, "problems", err.Error())
			last = data
			continue
		}
		last = data
		a.SetConfig(cfg)
		a.opts.Log.Info("configuration reloaded", "path", a.opts.ConfigPath, "pools", len(cfg.PoolsFor(a.opts.Environment)))
	}
}

// deliverSimulated posts a webhook of the simulated GitHub to the webhook
// handler, signed as GitHub signs, so simulated jobs take the real path.
func (a *App) deliverSimulated(event, deliveryID string, payload []byte) {
	mac := hmac.New(sha256.New, []byte(a.opts.WebhookSecret))
	mac.Write(payload)
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(payload))
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", deliveryID)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.Webhook.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		a.opts.Log.Warn("simulated delivery refused", "delivery", deliveryID, "status", rec.Code, "body", rec.Body.String())
	}
}
