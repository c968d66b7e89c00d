package appplatform

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

const (
	routeRuns    = "GET /repos/{owner}/{repo}/actions/runs"
	routeRunJobs = "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
)

// TestTransientErrorsSkipTheCycle: with four queued jobs every cycle would
// scale 1 → 3, but a transient failure anywhere before the write skips the
// cycle with a warning and scales nothing; the next cycle, the fault gone,
// scales.
func TestTransientErrorsSkipTheCycle(t *testing.T) {
	cases := []struct {
		name    string
		api     string
		arrange func(r *rig)
		// recovers: the next cycle, a minute later on the virtual clock,
		// scales. Not after GitHub's secondary limit: go-github holds it
		// itself, on the wall clock.
		recovers bool
	}{
		{"GitHub 500 listing runs", apiGitHub, func(r *rig) { r.gh.FailNext(routeRuns, 500, 1) }, true},
		{"GitHub 502 on a run's jobs, after the runs were listed", apiGitHub, func(r *rig) { r.gh.FailNext(routeRunJobs, 502, 1) }, true},
		{"GitHub secondary rate limit", apiGitHub, func(r *rig) { r.gh.FailNext(routeRuns, 429, 1) }, false},
		{"DigitalOcean 500 reading the app", apiDO, func(r *rig) { r.do.FailNext("GET", 500, 1) }, true},
		{"DigitalOcean 503 updating the app", apiDO, func(r *rig) { r.do.FailNext("PUT", 503, 1) }, true},
		{"DigitalOcean 429", apiDO, func(r *rig) { r.do.FailNext("GET", 429, 1) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, rep, err := cycleOnFourJobs(t, fastEnv, c.arrange)
			if err == nil || !IsTransient(err) {
				t.Fatalf("want a transient error, got %v", err)
			}
			if rep.Scaled || rep.Skipped == "" || r.count() != 1 || len(r.do.Updates()) != 0 {
				t.Fatalf("scaled %v, skipped %q, count %d, updates %d", rep.Scaled, rep.Skipped, r.count(), len(r.do.Updates()))
			}
			if !strings.Contains(r.logs.String(), `level=WARN msg="skipping cycle: transient API error" api=`+c.api) {
				t.Fatalf("no warning naming %s:\n%s", c.api, r.logs)
			}
			if strings.Contains(r.logs.String(), "level=ERROR") {
				t.Fatalf("a transient error logged as ERROR:\n%s", r.logs)
			}
			r.noSecrets(err.Error())
			if got := testutil.ToFloat64(r.scaler.m.apiErrors.WithLabelValues(c.api, "transient")); got != 1 {
				t.Fatalf("transient %s errors counted %v", c.api, got)
			}
			if !c.recovers {
				return
			}
			// A minute later (past any rate limit the fakes set) it scales.
			rep, err = r.advanceCycle(time.Minute)
			if err != nil || !rep.Scaled || r.count() != 3 {
				t.Fatalf("next cycle: scaled %v, count %d, err %v", rep.Scaled, r.count(), err)
			}
		})
	}
}

func TestRateLimitsAreWaitedOut(t *testing.T) {
	t.Run("GitHub", func(t *testing.T) {
		r := newRig(t, fastEnv)
		r.queue(4)
		r.gh.RateLimit(epoch.Add(150 * time.Second))
		var limited *rest.RateLimitError
		if _, err := r.cycle(); !errors.As(err, &limited) || !IsTransient(err) {
			t.Fatalf("want a rate limit, got %v", err)
		}
		before := len(r.gh.Requests())
		rep, err := r.advanceCycle(time.Minute)
		if err != nil || !strings.HasPrefix(rep.Skipped, "rate limited until") || len(r.gh.Requests()) != before {
			t.Fatalf("inside the limit: skipped %q, err %v, %d GitHub calls", rep.Skipped, err, len(r.gh.Requests())-before)
		}
		if !strings.Contains(r.logs.String(), "skipping cycle: an API is rate limited") {
			t.Fatal("the skip was not logged")
		}
		rep, err = r.advanceCycle(90 * time.Second) // t=150 s: the limit is over
		if err != nil || !rep.Scaled {
			t.Fatalf("after the limit: scaled %v, err %v", rep.Scaled, err)
		}
	})
	t.Run("DigitalOcean", func(t *testing.T) {
		r := newRig(t, fastEnv)
		r.queue(4)
		r.do.RateLimit(epoch.Add(90 * time.Second))
		if _, err := r.cycle(); !IsTransient(err) {
			t.Fatalf("want a rate limit, got %v", err)
		}
		before := len(r.do.Requests())
		rep, err := r.advanceCycle(time.Minute)
		if err != nil || rep.Skipped == "" || len(r.do.Requests()) != before {
			t.Fatalf("inside the limit: skipped %q, err %v, %d DigitalOcean calls", rep.Skipped, err, len(r.do.Requests())-before)
		}
		rep, err = r.advanceCycle(30 * time.Second)
		if err != nil || !rep.Scaled {
			t.Fatalf("after the limit: scaled %v, err %v", rep.Scaled, err)
		}
	})
}

// TestPermanentErrorsNeedAHuman: errors no retry will fix are logged as
// errors, counted as permanent, and scale nothing.
func TestPermanentErrorsNeedAHuman(t *testing.T) {
	const wrongGH, wrongDO = "ghp_WRONGSECRETtoken", "dop_v1_WRONGSECRETtoken"
	cases := []struct {
		name    string
		env     map[string]string
		arrange func(r *rig)
		api     string
		want    error
		message string
	}{
		{"DigitalOcean refuses the token", map[string]string{EnvDOToken: wrongDO}, nil, apiDO, ErrUnauthorized, "401"},
		{"no such app", map[string]string{EnvAppID: "0badc0de-0000-4000-8000-000000000000"}, nil, apiDO, ErrAppNotFound, "404"},
		{"no such worker", map[string]string{EnvWorkerName: "runners"}, nil, apiDO, ErrWorkerNotFound, `["janitor" "runner"]`},
		{"worker autoscaled by App Platform", nil, func(r *rig) {
			r.do.Change(r.appID, setWorkerField("runner", "autoscaling", map[string]any{"min_instance_count": 1, "max_instance_count": 3}))
		}, apiDO, ErrWorkerAutoscaled, "autoscaling"},
		{"GitHub refuses the token", map[string]string{EnvGitHubToken: wrongGH}, nil, apiGitHub, rest.ErrUnauthorized, "401"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, rep, err := cycleOnFourJobs(t, mergeEnv(fastEnv, c.env), c.arrange)
			if !errors.Is(err, c.want) || IsTransient(err) || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("want permanent %v mentioning %s, got %v", c.want, c.message, err)
			}
			if rep.Scaled || r.count() > 1 {
				t.Fatal("scaled despite the error")
			}
			if !strings.Contains(r.logs.String(), "level=ERROR") {
				t.Fatalf("not logged as an error:\n%s", r.logs)
			}
			if got := testutil.ToFloat64(r.scaler.m.apiErrors.WithLabelValues(c.api, "permanent")); got < 1 {
				t.Fatalf("permanent %s errors counted %v", c.api, got)
			}
			if got := testutil.ToFloat64(r.scaler.m.cycles.WithLabelValues("failed")); got != 1 {
				t.Fatalf("failed cycles %v", got)
			}
			for _, secret := range []string{wrongGH, wrongDO} {
				if strings.Contains(err.Error(), secret) || strings.Contains(r.logs.String(), secret) {
					t.Fatal("a token leaked")
				}
			}
			r.noSecrets(err.Error())
		})
	}
}

func mergeEnv(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
