package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// servable is what serve runs: an HTTP surface and the loops behind it.
type servable interface {
	// Handlers is the HTTP surface: split, the public address's and the
	// admin address's; else all of it in public, and admin nil.
	Handlers(split bool) (public, admin http.Handler)
	// Run runs the loops until its context ends, then waits for them to
	// finish the work in hand.
	Run(ctx context.Context) error
	// Drain answers the requests held open (agents' long polls, event
	// streams) at once, so that the HTTP server can stop.
	Drain()
	// Draining says a shutdown has started: the public health check
	// answers 503 from then on, so that a load balancer turns to another
	// replica while this one still serves what reaches it.
	Draining()
}

// serveUntilDone serves HTTP and runs the loops. On a signal it says the
// process is draining (the public health check turns 503, so that a load
// balancer sends new work elsewhere), stops the loops and keeps serving while they finish the work in hand (at
// most grace): a machine booting for a job still needs the agent API to
// say hello, fetch its runner and report it registered, and a delivery
// that arrives meanwhile is stored for the next start. Then it stops HTTP
// on every address together (idle connections closed, long polls
// answered at once), letting open requests finish, at most grace again.
// Past either grace serve exits 1. Work cut short is not lost: a delivery
// is answered 202 only once stored, a claim that did not finish is given
// back or expires at its deadline, and an unacknowledged message is
// received again after a restart.
func serveUntilDone(ctx context.Context, a servable, lns listeners, log *slog.Logger, s httpSettings) int {
	public, admin := a.Handlers(lns.admin != nil)
	servers := []*http.Server{newHTTPServer(public, s)}
	serving := []net.Listener{lns.public}
	if lns.admin != nil {
		servers, serving = append(servers, newHTTPServer(admin, s)), append(serving, lns.admin)
	}
	loopsCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	loopsDone := make(chan error, 1)
	go func() { loopsDone <- a.Run(loopsCtx) }()
	httpErr := make(chan error, len(servers))
	for i, srv := range servers {
		// Drain is idempotent: whichever server stops first answers what
		// both hold open.
		srv.RegisterOnShutdown(a.Drain)
		go func() { httpErr <- srv.Serve(serving[i]) }()
	}
	attrs := []any{"listen", lns.public.Addr().String()}
	if lns.admin != nil {
		attrs = append(attrs, "admin_listen", lns.admin.Addr().String())
	}
	log.Info("bullpen serving", append(attrs, "version", version())...)

	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing work in hand; still serving agents and storing deliveries until then; " +
			"a second SIGINT or SIGTERM (Ctrl-C again) exits at once")
	case err := <-httpErr:
		log.Error("HTTP server failed", "err", err)
		code = 1
	}
	a.Draining()
	stopLoops()
	select {
	case err := <-loopsDone:
		if err != nil {
			log.Error("a loop failed", "err", err)
			code = 1
		}
	case <-time.After(s.grace):
		// A loop stuck in a call that ignores cancellation: exit anyway,
		// so a supervisor can restart; the store keeps what was accepted.
		log.Error("loops did not stop in time; exiting with work in hand", "waited", s.grace)
		for _, srv := range servers {
			_ = srv.Close()
		}
		return 1
	}
	log.Info("loops stopped; closing HTTP")
	drained := make(chan bool, len(servers))
	for _, srv := range servers {
		go func() { drained <- drainHTTP(srv, s.grace, log) }()
	}
	for range servers {
		if !<-drained {
			code = 1
		}
	}
	log.Info("bullpen stopped")
	return code
}

// drainHTTP stops the server, waiting at most grace for the requests in
// progress; past it, their connections are closed. It reports whether
// every request finished in time. A slow sender holds it at most the read
// timeout, which is why that is short.
func drainHTTP(srv *http.Server, grace time.Duration, log *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err == nil || err == http.ErrServerClosed {
		return true
	}
	log.Error("requests still open after the shutdown grace; closing their connections", "waited", grace, "err", err)
	_ = srv.Close()
	return false
}
