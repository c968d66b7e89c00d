package ec2like

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Call is a provider's way of making one API call of op carrying n ids
// (or machines): it counts the call, fails it as the provider would
// (throttling, injected faults, a done ctx) and returns the moment the call
// is made at.
type Call func(ctx context.Context, op string, n int) (time.Time, error)

// Batch runs a batch state change over ids as every provider does: each
// call has EC2's all-or-nothing semantics (an unknown id, or a state the
// rules refuse, changes nothing; see Apply), and like every provider the
// batch skips unknown ids and goes on with the rest (domain.SkipUnknown).
// change gets each machine the rules move and the moment of its call.
// Called under the provider's lock.
func Batch[M Machine](ctx context.Context, op string, ids []string, call Call, lookup Lookup[M],
	rules Rules, change func(M, time.Time)) error {
	return domain.SkipUnknown(op, ids, func(ids []string) error {
		now, err := call(ctx, op, len(ids))
		if err != nil {
			return err
		}
		return Apply(op, ids, lookup, rules, func(m M) { change(m, now) })
	}, domain.UnknownIDs)
}

// Tag does CreateTags as every provider does (see AddTags), skipping
// unknown ids as Batch does, and returns the machines it tagged. Called
// under the provider's lock.
func Tag[M Machine](ctx context.Context, ids []string, tags map[string]string, call Call, lookup Lookup[M]) ([]M, error) {
	var tagged []M
	err := domain.SkipUnknown(OpCreateTags, ids, func(ids []string) error {
		if _, err := call(ctx, OpCreateTags, len(ids)); err != nil {
			return err
		}
		ms, err := AddTags(ids, tags, lookup)
		tagged = append(tagged, ms...)
		return err
	}, domain.UnknownIDs)
	return tagged, err
}

// DescribeImage begins a DescribeImages call for the image called name:
// the call is made, and refused without a name (RequireImageName). The
// provider then resolves the name its own way. Called under the provider's
// lock.
func DescribeImage(ctx context.Context, call Call, name string) error {
	if _, err := call(ctx, OpDescribeImages, 1); err != nil {
		return err
	}
	return RequireImageName(name)
}
