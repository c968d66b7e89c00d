package ec2like_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// box is a machine as a provider keeps one, reduced to what ec2like sees.
type box struct {
	inst         domain.CloudInstance
	seq          int
	terminatedAt time.Time
}

func (b *box) Instance() *domain.CloudInstance { return &b.inst }
func (b *box) Seq() int                        { return b.seq }
func (b *box) TerminatedAt() time.Time         { return b.terminatedAt }

// fleet makes machines "a", "b", … in the given states, in that creation
// order, each tagged with its own id under "name".
func fleet(states ...domain.CloudState) map[string]*box {
	all := map[string]*box{}
	for i, s := range states {
		id := string(rune('a' + i))
		all[id] = &box{seq: i + 1, inst: domain.CloudInstance{ID: id, State: s, Tags: map[string]string{"name": id}}}
	}
	return all
}

// lookupIn resolves ids among all, as a provider's lookup does.
func lookupIn(all map[string]*box, max int) ec2like.Lookup[*box] {
	return func(op string, ids []string) ([]*box, error) {
		return ec2like.Resolve(op, ids, max, func(id string) (*box, bool) {
			b, ok := all[id]
			return b, ok
		})
	}
}

var allStates = []domain.CloudState{
	domain.CloudPending, domain.CloudRunning, domain.CloudStopping,
	domain.CloudStopped, domain.CloudShuttingDown, domain.CloudTerminated,
}

func TestRulesFollowEC2(t *testing.T) {
	R, C, S := ec2like.Refuse, ec2like.Change, ec2like.Skip
	// Columns in the order of allStates.
	tests := []struct {
		name  string
		rules ec2like.Rules
		want  []ec2like.Verdict
	}{
		{"start", ec2like.StartRules, []ec2like.Verdict{S, S, R, C, R, R}},
		{"stop", ec2like.StopRules, []ec2like.Verdict{R, C, S, S, R, R}},
		{"terminate", ec2like.TerminateRules, []ec2like.Verdict{C, C, C, C, S, S}},
	}
	for _, tt := range tests {
		for i, s := range allStates {
			if got := tt.rules.Verdict(s); got != tt.want[i] {
				t.Errorf("%s of a %s machine: verdict %d, want %d", tt.name, s, got, tt.want[i])
			}
			if got := tt.rules.Changes(s); got != (tt.want[i] == C) {
				t.Errorf("%s of a %s machine: Changes %v", tt.name, s, got)
			}
		}
		if got := tt.rules.Verdict("rebooting"); got != R {
			t.Errorf("%s of an unknown state: verdict %d, want refuse", tt.name, got)
		}
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	tests := []struct {
		name     string
		states   []domain.CloudState
		ids      []string
		wantCode string
		changed  []string
	}{
		{"changes and skips", []domain.CloudState{domain.CloudRunning, domain.CloudStopped, domain.CloudStopping},
			[]string{"c", "a", "b"}, "", []string{"a"}},
		{"one refused changes nothing", []domain.CloudState{domain.CloudRunning, domain.CloudPending},
			[]string{"a", "b"}, ec2like.CodeIncorrectState, nil},
		{"one unknown changes nothing", []domain.CloudState{domain.CloudRunning},
			[]string{"a", "zz"}, ec2like.CodeNotFound, nil},
		{"duplicates change once", []domain.CloudState{domain.CloudRunning},
			[]string{"a", "a"}, "", []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			all := fleet(tt.states...)
			var changed []string
			err := ec2like.Apply(ec2like.OpStopInstances, tt.ids, lookupIn(all, 10), ec2like.StopRules,
				func(b *box) { changed = append(changed, b.inst.ID) })
			checkCode(t, err, ec2like.OpStopInstances, tt.wantCode)
			if !slices.Equal(changed, tt.changed) {
				t.Errorf("changed %v, want %v", changed, tt.changed)
			}
		})
	}
}

func TestResolveValidatesTheBatch(t *testing.T) {
	all := fleet(domain.CloudRunning, domain.CloudTerminated)
	tests := []struct {
		name     string
		ids      []string
		wantCode string
		sentinel error
		want     []string
	}{
		{"none", nil, ec2like.CodeMissingParameter, domain.ErrInvalidRequest, nil},
		{"too many", []string{"a", "b", "a", "b"}, ec2like.CodeInvalidParameter, domain.ErrInvalidRequest, nil},
		{"unknown", []string{"x", "a", "x"}, ec2like.CodeNotFound, domain.ErrUnknownInstance, nil},
		{"each once in order", []string{"b", "a", "b"}, "", nil, []string{"b", "a"}},
		{"terminated ones are known", []string{"b"}, "", nil, []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := lookupIn(all, 3)(ec2like.OpCreateTags, tt.ids)
			checkCode(t, err, ec2like.OpCreateTags, tt.wantCode)
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tt.sentinel)
			}
			if got := ids(ms); !slices.Equal(got, tt.want) {
				t.Errorf("resolved %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolveNamesEveryUnknownIDAndAsksOnce(t *testing.T) {
	asked := map[string]int{}
	_, err := ec2like.Resolve(ec2like.OpStartInstances, []string{"x", "a", "y", "x"}, 10,
		func(id string) (*box, bool) { asked[id]++; return nil, false })
	if ids := domain.UnknownIDs(err); !errors.Is(err, domain.ErrUnknownInstance) || !slices.Equal(ids, []string{"x", "a", "y"}) {
		t.Errorf("error %v names %v, want x, a, y", err, ids)
	}
	for id, n := range asked {
		if n != 1 {
			t.Errorf("asked about %s %d times", id, n)
		}
	}
}

func checkCode(t *testing.T, err error, op, code string) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		return
	}
	var ce *domain.CloudError
	if !errors.As(err, &ce) || ce.Op != op || ce.Code != code {
		t.Fatalf("error %v, want %s %s", err, op, code)
	}
}

func ids(ms []*box) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.inst.ID)
	}
	return out
}

// SkipRefused takes each machine a call is refused over out of it and
// calls again on the rest; those still there are refused by name, those
// terminated or shutting down are gone.
func TestSkipRefusedCallsAgainWithoutTheRefusedMachines(t *testing.T) {
	all := fleet(domain.CloudRunning, domain.CloudPending, domain.CloudStopped, domain.CloudTerminated)
	var calls [][]string
	var changed []string
	err := ec2like.SkipRefused(ec2like.OpStopInstances, []string{"a", "b", "c", "d"}, lookupIn(all, 10), func(ids []string) error {
		calls = append(calls, ids)
		return ec2like.Apply(ec2like.OpStopInstances, ids, lookupIn(all, 10), ec2like.StopRules,
			func(b *box) { changed = append(changed, b.inst.ID) })
	})
	checkCode(t, err, ec2like.OpStopInstances, ec2like.CodeIncorrectState)
	r, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(r.IDs, []string{"b"}) || !slices.Equal(r.Unknown, []string{"d"}) || r.Reason != "instance b is pending" ||
		errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("error %v; want b refused, d gone", err)
	}
	if !slices.Equal(changed, []string{"a"}) || len(calls) != 3 || !slices.Equal(calls[2], []string{"a", "c"}) {
		t.Fatalf("calls %v changed %v; want a stopped by the third call", calls, changed)
	}

	calls = nil
	err = ec2like.SkipRefused(ec2like.OpStopInstances, []string{"d"}, lookupIn(all, 10), func(ids []string) error {
		calls = append(calls, ids)
		return ec2like.Apply(ec2like.OpStopInstances, ids, lookupIn(all, 10), ec2like.StopRules, func(*box) {})
	})
	if got := domain.UnknownIDs(err); !errors.Is(err, domain.ErrUnknownInstance) || !slices.Equal(got, []string{"d"}) || len(calls) != 1 {
		t.Fatalf("error %v after calls %v; want d gone after one call", err, calls)
	}

	calls = nil
	err = ec2like.SkipRefused(ec2like.OpStopInstances, nil, lookupIn(all, 10), func(ids []string) error {
		calls = append(calls, ids)
		return ec2like.Apply(ec2like.OpStopInstances, ids, lookupIn(all, 10), ec2like.StopRules, func(*box) {})
	})
	if checkCode(t, err, ec2like.OpStopInstances, ec2like.CodeMissingParameter); len(calls) != 1 {
		t.Fatalf("%d calls without ids; want the one EC2 refuses", len(calls))
	}
}
