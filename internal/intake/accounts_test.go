package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// checkingGitHub is a recording GitHub that tells which accounts the App
// is installed on: it is not on ghost, and the look-up fails on flaky (a
// GitHub error, which says nothing).
type checkingGitHub struct {
	recordingGitHub
	mu     sync.Mutex
	checks map[string]int
	// block, when set, is called with each look-up's context before it
	// answers.
	block func(ctx context.Context) error
}

func (g *checkingGitHub) CheckAccount(ctx context.Context, owner string) error {
	g.mu.Lock()
	g.checks[strings.ToLower(owner)]++
	block := g.block
	g.mu.Unlock()
	if block != nil {
		if err := block(ctx); err != nil {
			return err
		}
	}
	switch strings.ToLower(owner) {
	case "ghost":
		return fmt.Errorf("%w: the App is not installed on ghost", domain.ErrUnauthorized)
	case "flaky":
		return errors.New("find the App's installation on flaky: 502 Bad Gateway")
	}
	return nil
}

func (g *checkingGitHub) checked() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.checks {
		out[k] = v
	}
	return out
}

func withChecker(f *fixture) *checkingGitHub {
	g := &checkingGitHub{checks: map[string]int{}}
	f.in.GitHub = g
	return g
}

// A batch asks GitHub about each owner once, however many of its jobs the
// owner has and whatever the answer: a failed look-up is not made again
// for the owner's next job.
func TestABatchChecksEachAccountOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	g := withChecker(f)
	id := int64(8100)
	deliver := func(repo string, n int) {
		for range n {
			id++
			f.deliver(jobEvent{action: "queued", id: id, runID: 81, repo: repo, labels: poolLabels(81)})
		}
	}
	deliver("flaky/app", 5)
	deliver("Ghost/app", 1)
	deliver("ghost/lib", 2)
	deliver("acme/widgets", 3)
	f.deliver(jobEvent{action: "queued", id: 8200, runID: 82, repo: "other/app", labels: nil}) // not ours: not checked
	f.step()
	if got, want := g.checked(), map[string]int{"flaky": 1, "ghost": 1, "acme": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("look-ups by owner %v, want %v", got, want)
	}
	for i := int64(8101); i <= id; i++ {
		j := f.Job(i)
		ghost := strings.EqualFold(ownerOf(j.Repo), "ghost")
		if rejected := j.Status == domain.JobRejected; rejected != ghost {
			t.Errorf("job %d of %s: %s %q", i, j.Repo, j.Status, j.Reason)
		}
		if ghost && !strings.Contains(j.Reason, "not installed on ghost") {
			t.Errorf("job %d rejected for %q, want GitHub's reason", i, j.Reason)
		}
	}
	f.wantEvents("queued", "rejected", 3)
	f.inboxEmpty()
}

// A look-up that does not answer is given up after AccountCheckTimeout, on
// the intake's clock: its jobs go on, served as if it had failed.
func TestAnAccountLookUpThatHangsIsGivenUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	g := withChecker(f)
	entered, release := make(chan context.Context, 1), make(chan struct{})
	g.block = func(ctx context.Context) error {
		entered <- ctx
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return errors.New("timeout after 30s")
		}
	}
	f.deliver(jobEvent{action: "queued", id: 8301, runID: 83, labels: poolLabels(83)})
	stepped := make(chan error, 1)
	go func() {
		_, err := f.in.Step(f.Ctx)
		stepped <- err
	}()
	ctx := <-entered
	f.Clock.Advance(f.in.opts.AccountCheckTimeout)
	f.Clock.Settle()
	select {
	case <-ctx.Done():
	default:
		t.Errorf("the look-up still runs %s after it began", f.in.opts.AccountCheckTimeout)
		close(release)
	}
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	if j := f.Job(8301); j.Status != domain.JobQueued {
		t.Fatalf("job %s %q, want queued", j.Status, j.Reason)
	}
	f.wantQueued(domain.QueuePool, 8301)
	f.inboxEmpty()
}
