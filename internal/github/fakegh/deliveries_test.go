package fakegh_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// A runner process connects with its JIT config, takes the queued job,
// and reports it done; the receiver hears queued, in_progress and
// completed, signed, in that order.
func TestRunnerProcessAndDeliveries(t *testing.T) {
	var mu sync.Mutex
	var actions []string
	got := make(chan struct{}, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ Action string }
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &ev)
		if !strings.HasPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=") || r.Header.Get("X-GitHub-Event") != "workflow_job" {
			t.Errorf("delivery headers %v", r.Header)
		}
		mu.Lock()
		actions = append(actions, ev.Action)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		got <- struct{}{}
	}))
	defer hook.Close()
	gh := fakegh.New()
	defer gh.Close()
	gh.SendDeliveries(hook.URL, "s")
	gh.AddRepo("acme/app")
	job := gh.QueueJob("acme/app", []string{"linux"})
	c, err := rest.New(rest.Options{BaseURL: gh.URL(), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterRunner(context.Background(), domain.Scope{Owner: "acme", Repo: "app"}, "r1", []string{"linux"})
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"/_fake/jit/run", "/_fake/jit/done"} {
		resp, err := http.Post(gh.URL()+route, "text/plain", strings.NewReader(reg.JITConfig))
		if err != nil || resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %v %v %s", route, resp.StatusCode, err, b)
		}
		resp.Body.Close()
	}
	for range 3 {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("deliveries did not come")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(actions, ",") != "queued,in_progress,completed" {
		t.Fatalf("deliveries %v", actions)
	}
	if j, _ := gh.Job(job.ID); j.Status != "completed" || j.Conclusion != "success" {
		t.Fatalf("job %+v", j)
	}
}
