package ec2like

import (
	"maps"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Machine is how the helpers see a provider's machine. A provider whose
// states change lazily settles its machines before it hands them over.
type Machine interface {
	// Instance is the machine's description, shared: changes to it
	// change the machine.
	Instance() *domain.CloudInstance
	// Seq is the machine's place in creation order (or adoption order),
	// unique within its provider.
	Seq() int
	// TerminatedAt is when the machine became terminated.
	TerminatedAt() time.Time
}

// Lookup is a provider's way of finding the machines of one call, as
// Resolve does: every id known, each machine once, or the call's error.
type Lookup[M any] func(op string, ids []string) ([]M, error)

// Resolve finds the machines one call names, each once and in the order
// first named, or fails the call as EC2 does when there are no ids
// (MissingParameter), more than max (InvalidParameterValue) or unknown
// ones (InvalidInstanceID.NotFound, naming every unknown id). find is
// asked about each distinct id once.
func Resolve[M any](op string, ids []string, max int, find func(id string) (M, bool)) ([]M, error) {
	if len(ids) == 0 {
		return nil, Errorf(op, CodeMissingParameter, domain.ErrInvalidRequest, "no instance ids given")
	}
	if len(ids) > max {
		return nil, Errorf(op, CodeInvalidParameter, domain.ErrInvalidRequest,
			"%d instance ids, at most %d per call", len(ids), max)
	}
	ms := make([]M, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	var unknown []string
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if m, ok := find(id); ok {
			ms = append(ms, m)
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, &domain.CloudError{Op: op, Code: CodeNotFound, Err: &domain.UnknownInstancesError{Op: op, IDs: unknown}}
	}
	return ms, nil
}

// Describe answers DescribeInstances with the machines the filter
// selects, as view describes them, in creation order: with IDs, exactly
// those, found by lookup (terminated ones included; an unknown id fails
// the call); without, every machine of all that is not terminated. The
// machines must carry every tag of f.Tags with the same value.
func Describe[M Machine](f domain.CloudFilter, all map[string]M, lookup Lookup[M],
	view func(M) domain.CloudInstance) ([]domain.CloudInstance, error) {
	var ms []M
	if len(f.IDs) > 0 {
		var err error
		if ms, err = lookup(OpDescribeInstances, f.IDs); err != nil {
			return nil, err
		}
		slices.SortFunc(ms, bySeq)
	} else {
		ms = Sorted(all)
	}
	var out []domain.CloudInstance
	for _, m := range ms {
		inst := m.Instance()
		if len(f.IDs) == 0 && inst.State == domain.CloudTerminated {
			continue
		}
		if HasTags(inst.Tags, f.Tags) {
			out = append(out, view(m))
		}
	}
	return out, nil
}

// Views describes, as view does, the machines of ids that all still holds,
// in the order of ids.
func Views[M any](all map[string]M, ids []string, view func(M) domain.CloudInstance) []domain.CloudInstance {
	out := make([]domain.CloudInstance, 0, len(ids))
	for _, id := range ids {
		if m, ok := all[id]; ok {
			out = append(out, view(m))
		}
	}
	return out
}

// Sorted returns the machines in creation order.
func Sorted[M Machine](all map[string]M) []M {
	ms := slices.Collect(maps.Values(all))
	slices.SortFunc(ms, bySeq)
	return ms
}

func bySeq[M Machine](a, b M) int { return a.Seq() - b.Seq() }

// Live counts the machines that hold capacity: all not yet terminated.
func Live[M Machine](all map[string]M) int {
	n := 0
	for _, m := range all {
		if m.Instance().State != domain.CloudTerminated {
			n++
		}
	}
	return n
}

// Purge forgets the machines terminated retention or longer before now:
// EC2 stops describing them.
func Purge[M Machine](all map[string]M, retention time.Duration, now time.Time) {
	for id, m := range all {
		if m.Instance().State == domain.CloudTerminated && !now.Before(m.TerminatedAt().Add(retention)) {
			delete(all, id)
		}
	}
}

// AddTags does CreateTags: it adds tags to the machines of ids, found by
// lookup, overwriting the values of keys they already have, and returns
// the machines it changed. A call without tags is refused
// (MissingParameter), as is one lookup fails; both change nothing.
func AddTags[M Machine](ids []string, tags map[string]string, lookup Lookup[M]) ([]M, error) {
	if len(tags) == 0 {
		return nil, Errorf(OpCreateTags, CodeMissingParameter, domain.ErrInvalidRequest, "no tags given")
	}
	ms, err := lookup(OpCreateTags, ids)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		maps.Copy(m.Instance().Tags, tags)
	}
	return ms, nil
}

// HasTags reports whether have holds every key of want with the same value.
func HasTags(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// CloneTags copies tags into a map of the machine's own, never nil, so
// that tags can be added to it.
func CloneTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	maps.Copy(out, tags)
	return out
}

// Snapshot copies a machine's description for a caller, tags included, so
// that later changes to the machine do not show in it, nor the caller's
// changes in the machine.
func Snapshot(inst domain.CloudInstance) domain.CloudInstance {
	inst.Tags = CloneTags(inst.Tags)
	return inst
}
