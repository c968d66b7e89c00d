package fakedo_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/bullpen-ci/bullpen/internal/autoscale/appplatform/fakedo"
	"github.com/bullpen-ci/bullpen/internal/clock"
)

const token = "dop_v1_fake"

type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultTransport.RoundTrip(r)
}

// client is godo's own typed client: if the fake's bodies decode into
// godo's types with the fields set, they are shaped like DigitalOcean's.
func client(t *testing.T, srv *fakedo.Server) *godo.Client {
	t.Helper()
	c, err := godo.New(&http.Client{Transport: bearer{}}, godo.SetBaseURL(srv.URL()+"/"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func newServer(t *testing.T) (*fakedo.Server, *clock.Virtual, string) {
	t.Helper()
	srv := fakedo.New()
	t.Cleanup(srv.Close)
	clk := clock.NewVirtual(start)
	srv.SetClock(clk)
	srv.RequireToken(token)
	id := srv.AddApp(&godo.AppSpec{
		Name:    "gh-runners",
		Region:  "nyc",
		Workers: []*godo.AppWorkerSpec{{Name: "runner", InstanceCount: 2, InstanceSizeSlug: "apps-s-1vcpu-1gb"}},
	})
	return srv, clk, id
}

func TestShapesDecodeIntoGodoTypes(t *testing.T) {
	srv, clk, id := newServer(t)
	c := client(t, srv)
	ctx := context.Background()

	app, resp, err := c.Apps.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if app.ID != id || app.Spec.Name != "gh-runners" || app.Spec.Workers[0].InstanceCount != 2 || !app.UpdatedAt.Equal(start) {
		t.Fatalf("app %+v spec %+v", app, app.Spec)
	}
	if app.ActiveDeployment == nil || app.ActiveDeployment.Phase != godo.DeploymentPhase_Active || app.PendingDeployment != nil {
		t.Fatalf("deployments: active %+v pending %+v", app.ActiveDeployment, app.PendingDeployment)
	}
	if app.Region == nil || app.Region.Slug != "nyc" || resp.Rate.Limit != 5000 || resp.Rate.Remaining == 0 {
		t.Fatalf("region %+v rate %+v", app.Region, resp.Rate)
	}

	clk.Advance(time.Minute)
	app.Spec.Workers[0].InstanceCount = 4
	updated, _, err := c.Apps.Update(ctx, id, &godo.AppUpdateRequest{Spec: app.Spec})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Spec.Workers[0].InstanceCount != 4 || !updated.UpdatedAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("updated %+v", updated)
	}
	p := updated.PendingDeployment
	if p == nil || p.Phase != godo.DeploymentPhase_PendingDeploy || p.Spec.Workers[0].InstanceCount != 4 {
		t.Fatalf("pending deployment %+v", p)
	}
	srv.Deploy(id)
	app, _, _ = c.Apps.Get(ctx, id)
	if app.PendingDeployment != nil || app.ActiveDeployment.ID != p.ID || app.ActiveDeployment.Phase != godo.DeploymentPhase_Active {
		t.Fatalf("after Deploy: active %+v pending %+v", app.ActiveDeployment, app.PendingDeployment)
	}
	if srv.WorkerCount(id, "runner") != 4 || len(srv.Updates()) != 1 {
		t.Fatalf("count %d, updates %d", srv.WorkerCount(id, "runner"), len(srv.Updates()))
	}
}

func TestErrorAnswers(t *testing.T) {
	cases := []struct {
		name    string
		arrange func(srv *fakedo.Server, id *string)
		status  int
		message string
	}{
		{"unknown app", func(_ *fakedo.Server, id *string) { *id = "nope" }, 404, "could not be found"},
		{"wrong token", func(srv *fakedo.Server, _ *string) { srv.RequireToken("another") }, 401, "Unable to authenticate you"},
		{"injected 500", func(srv *fakedo.Server, _ *string) { srv.FailNext("GET", 500, 1) }, 500, "unable to give you a response"},
		{"injected 429", func(srv *fakedo.Server, _ *string) { srv.FailNext("", 429, 1) }, 429, "Rate limit"},
		{"rate limited", func(srv *fakedo.Server, _ *string) { srv.RateLimit(start.Add(time.Hour)) }, 429, "Rate limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, _, id := newServer(t)
			c.arrange(srv, &id)
			_, resp, err := client(t, srv).Apps.Get(context.Background(), id)
			var answer *godo.ErrorResponse
			if !errors.As(err, &answer) || answer.Response.StatusCode != c.status || !strings.Contains(answer.Message, c.message) || answer.RequestID == "" {
				t.Fatalf("got %v", err)
			}
			if c.status == 429 && (resp.Rate.Remaining != 0 || !resp.Rate.Reset.After(start)) {
				t.Fatalf("rate %+v", resp.Rate)
			}
		})
	}
}

func TestInvalidSpecIsRefused(t *testing.T) {
	srv, _, id := newServer(t)
	c := client(t, srv)
	for _, spec := range []*godo.AppSpec{
		{Name: ""},
		{Name: "x", Workers: []*godo.AppWorkerSpec{{Name: "runner", InstanceCount: 251}}},
	} {
		_, _, err := c.Apps.Update(context.Background(), id, &godo.AppUpdateRequest{Spec: spec})
		var answer *godo.ErrorResponse
		if !errors.As(err, &answer) || answer.Response.StatusCode != 400 {
			t.Fatalf("spec %+v: got %v", spec, err)
		}
	}
	if len(srv.Updates()) != 0 {
		t.Fatal("an invalid spec was stored")
	}
}

func TestOtherWriters(t *testing.T) {
	srv, clk, id := newServer(t)
	c := client(t, srv)
	ctx := context.Background()
	setSize := func(size string) func(map[string]any) {
		return func(spec map[string]any) {
			spec["workers"].([]any)[0].(map[string]any)["instance_size_slug"] = size
		}
	}

	srv.AfterGet(id, setSize("apps-s-2vcpu-4gb"))
	first, _, _ := c.Apps.Get(ctx, id)
	second, _, _ := c.Apps.Get(ctx, id)
	if first.Spec.Workers[0].InstanceSizeSlug != "apps-s-1vcpu-1gb" || second.Spec.Workers[0].InstanceSizeSlug != "apps-s-2vcpu-4gb" {
		t.Fatal("AfterGet did not change the spec between the two reads")
	}

	clk.Advance(time.Second)
	srv.AfterPut(id, setSize("apps-d-1vcpu-2gb"))
	second.Spec.Workers[0].InstanceCount = 3
	answer, _, err := c.Apps.Update(ctx, id, &godo.AppUpdateRequest{Spec: second.Spec})
	if err != nil || answer.Spec.Workers[0].InstanceSizeSlug != "apps-s-2vcpu-4gb" {
		t.Fatalf("the PUT's own answer shows the spec it wrote: %v", err)
	}
	third, _, _ := c.Apps.Get(ctx, id)
	if third.Spec.Workers[0].InstanceSizeSlug != "apps-d-1vcpu-2gb" || third.Spec.Workers[0].InstanceCount != 3 {
		t.Fatalf("AfterPut: %+v", third.Spec.Workers[0])
	}

	srv.Change(id, func(spec map[string]any) { spec["unmodelled"] = json.Number("1") })
	if srv.Spec(id)["unmodelled"] == nil {
		t.Fatal("Change lost a field godo does not model")
	}
	got := srv.Requests()
	if len(got) != 4 || got[0] != "GET /v2/apps/"+id || got[2] != "PUT /v2/apps/"+id {
		t.Fatalf("requests %q", got)
	}
}
