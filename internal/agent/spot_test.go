package agent_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// spotIMDS is IMDSv2 with the instance's id, and a spot interruption
// notice when notice is set.
func spotIMDS(t *testing.T, notice string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			io.WriteString(w, "session")
		case r.Header.Get("X-aws-ec2-metadata-token") != "session":
			http.Error(w, "no token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/instance-id":
			io.WriteString(w, "i-bp-1")
		case r.URL.Path == "/latest/dynamic/instance-identity/document", r.URL.Path == "/latest/dynamic/instance-identity/signature":
			io.WriteString(w, "unchecked here")
		case r.URL.Path == "/latest/meta-data/spot/instance-action" && notice != "":
			io.WriteString(w, notice)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSpotNotice(t *testing.T) {
	ctx := context.Background()
	none, err := agent.SpotNotice(ctx, http.DefaultClient, spotIMDS(t, "").URL)
	if err != nil || none != nil {
		t.Fatalf("without a notice: %+v, %v", none, err)
	}
	act, err := agent.SpotNotice(ctx, http.DefaultClient, spotIMDS(t, `{"action": "terminate", "time": "2026-11-24T08:22:00Z"}`).URL)
	if err != nil || act == nil || act.Action != "terminate" || act.Time != "2026-11-24T08:22:00Z" {
		t.Fatalf("with a notice: %+v, %v", act, err)
	}
	if _, err := agent.SpotNotice(ctx, http.DefaultClient, spotIMDS(t, "not json").URL); err == nil {
		t.Fatal("a notice that is not JSON was accepted")
	}
}

// An agent whose machine gets a spot interruption notice tells the control
// plane, which takes the instance out of service.
func TestAgentReportsASpotInterruption(t *testing.T) {
	r := newRig(t)
	imds := spotIMDS(t, `{"action": "terminate", "time": "2026-11-24T08:22:00Z"}`)
	cfg := r.config("bp-1", "secret")
	r.cp.Launch("bp-1", "booting", "secret")
	cfg.CloudID, cfg.CloudIDFrom, cfg.MetadataURL = "", "imds", imds.URL
	a, err := agent.New(cfg, agent.Deps{Clock: r.cp.Clock, HTTP: r.srv.Client(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	r.cp.Calls.Await(t, 1, func(c agentapitestCall) bool {
		return c.Op == "signal" && c.Signal.Kind == domain.SignalInterrupted && c.Err == nil
	})
	cancel()
	<-done
}
