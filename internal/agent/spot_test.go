package agent_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

const notice = `{"action": "terminate", "time": "2026-11-24T08:22:00Z"}`

// spotWorld is a machine's metadata service (IMDSv2, which serves nothing
// without a session token) and a control plane that accepts everything but
// answers the first interrupted signal 503, as a restarting one would. It
// counts what the agent asked of each.
type spotWorld struct {
	*stubPlane
	notice string // the spot notice once EC2 gives one
	polls  int    // reads of the spot notice
}

func newSpotWorld(t *testing.T) (w *spotWorld, imds, plane *httptest.Server) {
	stub, plane := newStubPlane(t, nil, func(kind string, n int) int {
		if kind == string(domain.SignalInterrupted) && n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	w = &spotWorld{stubPlane: stub}
	imds = httptest.NewServer(http.HandlerFunc(w.metadata))
	t.Cleanup(imds.Close)
	return w, imds, plane
}

func (w *spotWorld) metadata(rw http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		io.WriteString(rw, "session")
	case r.Header.Get("X-aws-ec2-metadata-token") != "session":
		http.Error(rw, "no token", http.StatusUnauthorized)
	case r.URL.Path == "/latest/meta-data/instance-id":
		io.WriteString(rw, "i-bp-1")
	case r.URL.Path == "/latest/dynamic/instance-identity/document", r.URL.Path == "/latest/dynamic/instance-identity/signature":
		io.WriteString(rw, "unchecked here")
	case r.URL.Path == "/latest/meta-data/spot/instance-action":
		var notice string
		w.count(func() { w.polls++; notice = w.notice })
		if notice == "" {
			http.NotFound(rw, r)
			return
		}
		io.WriteString(rw, notice)
	default:
		http.NotFound(rw, r)
	}
}

func (w *spotWorld) give(notice string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notice = notice
}

// An agent whose cloud id comes from IMDS reads the spot notice at once
// and then every interval, with a session token. On a notice it tells the
// control plane, retrying until it is heard, once; then it stops looking
// and carries on: the machine goes by itself.
func TestAgentWatchesForASpotInterruption(t *testing.T) {
	r := newRig(t)
	w, imds, plane := newSpotWorld(t)
	cfg := r.config("bp-1", "secret")
	cfg.CloudID, cfg.CloudIDFrom, cfg.MetadataURL = "", "imds", imds.URL
	cfg.SpotWatchEvery = 7 * time.Second
	clk, g := r.startAgainst(cfg, plane)

	w.await(t, "the first look", func() bool { return w.polls == 1 && w.signals["warm"] == 1 })
	clk.BlockUntil(2) // the heartbeat's interval and the watch's
	clk.Advance(5 * time.Second)
	clk.BlockUntil(2) // the next heartbeat's too
	if next, _ := clk.Next(); next.Sub(agentapitest.T0) != 7*time.Second {
		t.Fatalf("next look %s after the first, want 7s", next.Sub(agentapitest.T0))
	}
	clk.Advance(2 * time.Second)
	w.await(t, "the second look", func() bool { return w.polls == 2 })

	w.give(notice)
	clk.BlockUntil(2)
	// The heartbeat at 10 s is answered before the look at 14 s finds the
	// notice: one answered after the report was refused would end its
	// backoff at once.
	var seen int
	w.read(func() { seen = w.beats })
	clk.Advance(3 * time.Second)
	w.await(t, "the heartbeat", func() bool { return w.beats == seen+1 })
	clk.BlockUntil(2)
	clk.Advance(4 * time.Second)
	w.await(t, "the report", func() bool { return w.signals["interrupted"] == 1 })
	clk.BlockUntil(2) // the heartbeat's interval and the report's backoff
	clk.Advance(time.Second)
	w.await(t, "the report again", func() bool { return w.signals["interrupted"] == 2 })

	beats := 0
	w.read(func() { beats = w.beats })
	for range 4 {
		clk.BlockUntil(1)
		clk.Advance(7 * time.Second)
	}
	w.await(t, "heartbeats after the notice", func() bool { return w.beats >= beats+4 })
	w.read(func() {
		if w.polls != 3 || w.signals["interrupted"] != 2 {
			t.Errorf("after the notice: %d looks, %d reports; want 3 and 2 (the first refused)", w.polls, w.signals["interrupted"])
		}
	})
	select {
	case <-g.done:
		t.Fatalf("the agent stopped after the notice: %v", g.err)
	default:
	}
}

// An agent told its cloud id does not look: the notice is EC2's, read
// from the metadata service only an agent on EC2 uses.
func TestAgentWithAGivenCloudIDDoesNotWatch(t *testing.T) {
	r := newRig(t)
	w, imds, plane := newSpotWorld(t)
	w.give(notice)
	cfg := r.config("bp-1", "secret")
	cfg.MetadataURL = imds.URL
	clk, _ := r.startAgainst(cfg, plane)
	w.await(t, "warm", func() bool { return w.signals["warm"] == 1 })
	clk.BlockUntil(1)
	clk.Advance(time.Minute)
	w.await(t, "a heartbeat", func() bool { return w.beats == 2 })
	w.read(func() {
		if w.polls != 0 || w.signals["interrupted"] != 0 {
			t.Fatalf("%d looks, %d reports, want none", w.polls, w.signals["interrupted"])
		}
	})
}

func TestSpotNotice(t *testing.T) {
	ctx := context.Background()
	w, imds, _ := newSpotWorld(t)
	none, err := agent.SpotNotice(ctx, http.DefaultClient, imds.URL)
	if err != nil || none != nil {
		t.Fatalf("without a notice: %+v, %v", none, err)
	}
	w.give(notice)
	act, err := agent.SpotNotice(ctx, http.DefaultClient, imds.URL)
	if err != nil || act == nil || act.Action != "terminate" || act.Time != "2026-11-24T08:22:00Z" {
		t.Fatalf("with a notice: %+v, %v", act, err)
	}
	w.give("not json")
	if _, err := agent.SpotNotice(ctx, http.DefaultClient, imds.URL); err == nil {
		t.Fatal("a notice that is not JSON was accepted")
	}
}

// Against the real control plane: the notice takes the instance out of
// service, and the agent learns that its instance has ended.
func TestAgentReportsASpotInterruption(t *testing.T) {
	r := newRig(t)
	w, imds, _ := newSpotWorld(t)
	w.give(notice)
	cfg := r.launched("bp-1")
	cfg.CloudID, cfg.CloudIDFrom, cfg.MetadataURL = "", "imds", imds.URL
	g := r.run(cfg)
	r.cp.Calls.Await(t, 1, func(c agentapitestCall) bool {
		return c.Op == "signal" && c.Signal.Kind == domain.SignalInterrupted && c.Err == nil
	})
	if got := r.cp.Get("bp-1").State; got != domain.StateTerminating {
		t.Fatalf("instance %s, want terminating", got)
	}
	// Its next heartbeat or poll is told the instance ended.
	if _, err := stepUntilDone(t, r.cp.Clock, g); !errors.Is(err, agent.ErrInstanceEnded) {
		t.Fatalf("Run: %v, want ErrInstanceEnded", err)
	}
}
