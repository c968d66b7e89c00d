package simulate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// A replay interrupted half-way (Ctrl-C) says so and gives no report:
// the jobs not yet arrived would read as a history fully replayed.
func TestAnInterruptedReplayGivesNoReport(t *testing.T) {
	jobs := burst("small-x64", "dev")[:12] // the quiet hour and the burst's first jobs: enough to stop half-way
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := func(_ time.Time, arrived, total int) {
		if arrived >= total/2 {
			cancel()
		}
	}
	rep, err := simulate.Run(ctx, simulate.Options{Config: example(t), Jobs: jobs, Seed: 3, Progress: progress})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after") {
		t.Fatalf("err = %v, want an interruption wrapping context.Canceled", err)
	}
	if !strings.Contains(err.Error(), " of 12 jobs arrived") {
		t.Errorf("err = %v: want how far the replay came", err)
	}
	if !reflect.DeepEqual(rep, simulate.Report{}) {
		t.Errorf("an interrupted replay reported %d jobs, %d replayed, %s simulated", rep.Jobs, rep.Replayed, rep.Virtual)
	}

	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := simulate.Run(cancelled, simulate.Options{Config: example(t), Jobs: jobs}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a replay on a cancelled context: %v", err)
	}
}

// A search interrupted between rounds gives no suggestion: the last
// round's plans would pass for its outcome.
func TestAnInterruptedSuggestionGivesNone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rounds := 0
	s, err := simulate.Suggest(ctx, simulate.SuggestOptions{
		Options:   simulate.Options{Config: example(t), Jobs: burst("small-x64", "dev")[:12], Seed: 3, Tail: 3 * time.Minute},
		TargetP90: time.Millisecond, Rounds: 3,
		OnRound: func(simulate.Round) { rounds++; cancel() },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rounds != 1 || s.Plans != nil || s.Rounds != nil || s.Config != nil || s.Report.Replayed != 0 {
		t.Errorf("after %d rounds, an interrupted search returned %d plans, rounds %+v", rounds, len(s.Plans), s.Rounds)
	}
}
