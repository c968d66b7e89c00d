package storetest

import (
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// The just-in-time runner registration lives on the instance: its agent
// starts that runner whichever job GitHub hands it, so a backend that drops
// or mixes up the two fields leaves an instance unable to serve.
func testRunnerRoundTrip(t *testing.T, e *env) {
	bare := instance("bare", domain.StateReady)
	bare.RunnerName, bare.RunnerConfig = "", ""
	// A config is opaque: keep it byte for byte, quotes and newlines too.
	odd := instance("odd", domain.StateReady)
	odd.RunnerConfig = "eyJ'quoted\"\n\tconfig==" + secretConfig
	e.create(instance("a", domain.StateReady), bare, odd)
	for _, want := range []domain.Instance{instance("a", domain.StateReady), bare, odd} {
		got := e.get(want.ID)
		if got.RunnerName != want.RunnerName || got.RunnerConfig != want.RunnerConfig {
			t.Fatalf("%s: runner %q (config equal: %t), want %q", want.ID, got.RunnerName,
				got.RunnerConfig == want.RunnerConfig, want.RunnerName)
		}
	}
	for _, got := range e.list(domain.InstanceFilter{}) {
		sameInstance(t, "listed instance", got, e.get(got.ID))
	}

	// Given a runner with its claim, then spent when it is released.
	g := e.move("bare", readyUnbound, func(i *domain.Instance) {
		claim("job-1")(i)
		i.RunnerName, i.RunnerConfig = "bp-bare-1", secretConfig
	})
	if s := e.get("bare"); s.RunnerName != "bp-bare-1" || s.RunnerConfig != secretConfig {
		t.Fatalf("claimed: stored runner %q (config set: %t), want bp-bare-1 with its config", s.RunnerName, s.RunnerConfig != "")
	}
	g = e.move("bare", domain.GuardOf(g), to(domain.StateRunning))
	e.move("bare", domain.GuardOf(g), func(i *domain.Instance) {
		i.State, i.Job, i.RunnerName, i.RunnerConfig = domain.StateReleasing, "", "", ""
	})
	if s := e.get("bare"); s.RunnerName != "" || s.RunnerConfig != "" {
		t.Fatalf("released: stored runner %q (config set: %t), want both empty", s.RunnerName, s.RunnerConfig != "")
	}
}

// The runner config is a credential: no refusal may quote it, whatever
// the caller got wrong.
func testErrorsRedacted(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady), instance("done", domain.StateTerminated))
	withSecret := func(i *domain.Instance) { i.RunnerConfig = secretConfig }
	var errs []error
	add := func(_ domain.Instance, err error) { errs = append(errs, err) }
	add(e.s.Transition(e.ctx, "a", domain.Guard{State: domain.StateClaimed, Job: "job-1"}, withSecret))
	add(e.s.Transition(e.ctx, "a", readyUnbound, func(i *domain.Instance) { withSecret(i); i.State = domain.StateRunning }))
	add(e.s.Transition(e.ctx, "a", readyUnbound, func(i *domain.Instance) { withSecret(i); i.State = "idle" }))
	add(e.s.Transition(e.ctx, "ghost", readyUnbound, withSecret))
	add(e.s.Transition(e.ctx, "done", domain.Guard{State: domain.StateTerminated}, withSecret))
	errs = append(errs,
		e.s.CreateInstances(e.ctx, []domain.Instance{instance("a", domain.StateReady)}),
		e.s.CreateInstances(e.ctx, []domain.Instance{instance("x", domain.State("idle"))}),
		e.s.DeleteInstances(e.ctx, []string{"a"}))
	results, err := e.s.TransitionBatch(e.ctx, []domain.TransitionRequest{
		{ID: "a", Guard: domain.Guard{State: domain.StateBooting}, Apply: withSecret},
		{ID: "ghost", Guard: readyUnbound, Apply: withSecret},
		{ID: "done", Guard: domain.Guard{State: domain.StateTerminated}, Apply: to(domain.StateReady)},
	})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	for _, r := range results {
		errs = append(errs, r.Err)
	}
	for k, err := range errs {
		if err == nil {
			t.Fatalf("error %d: the change was accepted", k)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("error %d carries the runner config: %v", k, err)
		}
	}
	sameInstance(t, "instance after refused changes", e.get("a"), created(instance("a", domain.StateReady), start))
}
