// Package cloudtest is the contract every domain.Cloud implementation must
// pass, so that the simulated cloud and the real providers cannot drift
// apart. An implementation's test calls Run with a constructor:
//
//	func TestContract(t *testing.T) {
//		cloudtest.Run(t, func(t *testing.T) domain.Cloud { return newCloud(t) })
//	}
//
// The suite assumes nothing about timing beyond eventual convergence: right
// after a call it only checks states that hold whatever the latency (after
// Stop a machine is stopping or stopped), and where it needs a final state it
// polls List a bounded number of times with short pauses. The cloud under
// test must therefore move on its own: the simulated cloud with zero
// latency, or a real service. It must resolve the image name Image. Every
// case tags its machines with a fresh controller id and terminates them when
// it ends, so the suite can share one account or emulator between cases.
package cloudtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Image is the image name the suite resolves and launches.
const Image = "bullpen-cloudtest"

// UnknownID is a well-formed instance id that no cloud is expected to hold.
const UnknownID = "i-0000000000000dead"

// Polling bounds for states that converge: at most pollAttempts Lists,
// pollPause apart.
const (
	pollAttempts = 400
	pollPause    = 5 * time.Millisecond
)

// Run runs the contract against clouds made by newCloud, one per case.
func Run(t *testing.T, newCloud func(t *testing.T) domain.Cloud) {
	cases := []struct {
		name string
		run  func(*fixture)
	}{
		{"CreateTaggedThenListByTag", testCreateTaggedThenListByTag},
		{"ListByIDs", testListByIDs},
		{"TagAddsAndOverwrites", testTagAddsAndOverwrites},
		{"StopThenStart", testStopThenStart},
		{"TerminateLeavesTagListings", testTerminateLeavesTagListings},
		{"BatchOfMaxBatch", testBatchOfMaxBatch},
		{"UnknownIDsAreErrors", testUnknownIDsAreErrors},
		{"MixedUnknownIDActsOnTheOthers", testMixedUnknownIDActsOnTheOthers},
		{"ClientTokenIsIdempotent", testClientTokenIsIdempotent},
		{"ResolveImage", testResolveImage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(newFixture(t, newCloud(t)))
		})
	}
}

// fixture is one case's cloud, with helpers that fail the test on error.
type fixture struct {
	t          *testing.T
	ctx        context.Context
	cloud      domain.Cloud
	controller string // this case's value of domain.TagController
}

func newFixture(t *testing.T, c domain.Cloud) *fixture {
	f := &fixture{t: t, ctx: t.Context(), cloud: c, controller: "cloudtest-" + nonce(t)}
	t.Cleanup(f.terminateAll)
	return f
}

func nonce(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("nonce: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// tags returns this case's controller tag plus extra key=value pairs.
func (f *fixture) tags(kv ...string) map[string]string {
	m := map[string]string{domain.TagController: f.controller}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// create launches n machines tagged with tags and checks the answer.
func (f *fixture) create(n int, tags map[string]string, token string) []domain.CloudInstance {
	f.t.Helper()
	image, err := f.cloud.ResolveImage(f.ctx, Image, domain.RunnerSpec{})
	if err != nil {
		f.t.Fatalf("ResolveImage(%q): %v", Image, err)
	}
	got, err := f.cloud.Create(f.ctx, domain.LaunchSpec{
		Runner:      domain.RunnerSpec{Name: "cloudtest", Image: Image, CPU: domain.Range{Min: 2, Max: 2}},
		ImageID:     image,
		Count:       n,
		Tags:        tags,
		ClientToken: token,
	})
	if err != nil {
		f.t.Fatalf("Create %d: %v", n, err)
	}
	if len(got) != n {
		f.t.Fatalf("Create %d returned %d machines", n, len(got))
	}
	seen := map[string]bool{}
	for _, m := range got {
		if m.ID == "" || seen[m.ID] {
			f.t.Fatalf("Create returned an empty or repeated id in %v", ids(got))
		}
		seen[m.ID] = true
		checkTags(f.t, m, tags)
		checkState(f.t, m, domain.CloudPending, domain.CloudRunning)
		if m.InstanceType == "" || m.LaunchedAt.IsZero() {
			f.t.Errorf("%s: instance type %q, launched at %v", m.ID, m.InstanceType, m.LaunchedAt)
		}
	}
	return got
}

func (f *fixture) list(filter domain.CloudFilter) []domain.CloudInstance {
	f.t.Helper()
	got, err := f.cloud.List(f.ctx, filter)
	if err != nil {
		f.t.Fatalf("List %+v: %v", filter, err)
	}
	return got
}

// eventually polls cond until it holds, failing with its last complaint.
func (f *fixture) eventually(cond func() (bool, string)) {
	f.t.Helper()
	var why string
	for attempt := range pollAttempts {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		if attempt+1 < pollAttempts {
			time.Sleep(pollPause)
		}
	}
	f.t.Fatalf("did not converge after %d attempts: %s", pollAttempts, why)
}

// waitState waits until every machine of ms is in state.
func (f *fixture) waitState(ms []domain.CloudInstance, state domain.CloudState) {
	f.t.Helper()
	f.eventually(func() (bool, string) {
		for _, m := range f.list(domain.CloudFilter{IDs: ids(ms)}) {
			if m.State != state {
				return false, fmt.Sprintf("%s is %s, want %s", m.ID, m.State, state)
			}
		}
		return true, ""
	})
}

// waitListed waits until listing by the case's tags shows exactly want:
// a terminated machine leaves it in its own time.
func (f *fixture) waitListed(want []string) {
	f.t.Helper()
	f.eventually(func() (bool, string) {
		got := f.list(domain.CloudFilter{Tags: f.tags()})
		return sameIDs(got, want), fmt.Sprintf("tag listing %v, want %v", ids(got), want)
	})
}

// terminateAll cleans up after a case. The case's context is gone by now.
func (f *fixture) terminateAll() {
	ctx := context.Background()
	live, err := f.cloud.List(ctx, domain.CloudFilter{Tags: f.tags()})
	if err != nil {
		f.t.Logf("cleanup: list: %v", err)
		return
	}
	for _, chunk := range domain.Chunk(ids(live), domain.MaxBatch) {
		if err := f.cloud.Terminate(ctx, chunk); err != nil {
			f.t.Logf("cleanup: terminate: %v", err)
		}
	}
}

func ids(ms []domain.CloudInstance) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// sameIDs reports whether got and want hold the same ids, in any order.
func sameIDs(got []domain.CloudInstance, want ...[]string) bool {
	var w []string
	for _, ws := range want {
		w = append(w, ws...)
	}
	g := ids(got)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func checkIDs(t *testing.T, what string, got []domain.CloudInstance, want ...[]string) {
	t.Helper()
	if !sameIDs(got, want...) {
		t.Errorf("%s: got %v, want %v", what, ids(got), want)
	}
}

func checkTags(t *testing.T, m domain.CloudInstance, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := m.Tags[k]; !ok || got != v {
			t.Errorf("%s: tag %s = %q (present %v), want %q", m.ID, k, got, ok, v)
		}
	}
}

func checkState(t *testing.T, m domain.CloudInstance, states ...domain.CloudState) {
	t.Helper()
	if !slices.Contains(states, m.State) {
		t.Errorf("%s is %s, want one of %v", m.ID, m.State, states)
	}
}

// WantCode fails the test unless err wraps sentinel and is a
// *domain.CloudError carrying the provider's code: what an implementation's
// own tests check of each refusal it makes.
func WantCode(t *testing.T, err error, sentinel error, code string) {
	t.Helper()
	var ce *domain.CloudError
	if !errors.Is(err, sentinel) || !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("error %v, want %s wrapping %v", err, code, sentinel)
	}
}

// checkUnknown asserts err reports an unknown instance as a *CloudError.
func checkUnknown(t *testing.T, what string, err error) {
	t.Helper()
	var ce *domain.CloudError
	switch {
	case err == nil:
		t.Errorf("%s with an unknown id succeeded", what)
	case !errors.Is(err, domain.ErrUnknownInstance):
		t.Errorf("%s: %v does not wrap ErrUnknownInstance", what, err)
	case !errors.As(err, &ce):
		t.Errorf("%s: %v is not a *domain.CloudError", what, err)
	}
}
