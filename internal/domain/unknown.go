package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// UnknownInstancesError says which ids of a batch call the cloud does not
// know (terminated long ago, or never its own). The call acted on the other
// ids. It wraps ErrUnknownInstance.
type UnknownInstancesError struct {
	Op  string
	IDs []string
}

func (e *UnknownInstancesError) Error() string {
	return fmt.Sprintf("%s: unknown instances %s", e.Op, strings.Join(e.IDs, ", "))
}

func (e *UnknownInstancesError) Unwrap() error { return ErrUnknownInstance }

// TerminateDone says whether a terminate call that returned err left every
// machine of its batch terminated or gone: it succeeded, or the cloud named
// ids it no longer knows and acted on the others, which is what was asked.
func TerminateDone(err error) bool {
	return err == nil || errors.Is(err, ErrUnknownInstance)
}

// SkipUnknown runs a batch call on ids and, when it fails because some ids
// are unknown (unknown names them, from the error), runs it again on the
// others, so that one machine gone does not hold back the rest. It returns
// nil, an *UnknownInstancesError naming every id it skipped, or the first
// other error. unknown returns nil when the error is not about ids.
func SkipUnknown(op string, ids []string, call func(ids []string) error, unknown func(error) []string) error {
	var skipped []string
	var first *CloudError // the provider's own error, kept for its code
	for {
		err := call(ids)
		if err == nil {
			break
		}
		bad := unknown(err)
		rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(bad, id) })
		if len(bad) == 0 || len(rest) == len(ids) {
			return err // not about ids, or about ids it did not send
		}
		if first == nil {
			first, _ = errors.AsType[*CloudError](err)
		}
		skipped, ids = append(skipped, bad...), rest
		if len(ids) == 0 {
			break
		}
	}
	if len(skipped) == 0 {
		return nil
	}
	u := &UnknownInstancesError{Op: op, IDs: skipped}
	if first != nil {
		return &CloudError{Op: first.Op, Code: first.Code, Err: u}
	}
	return u
}

// UnknownIDs returns the ids an error names as unknown, or nil.
func UnknownIDs(err error) []string {
	if e, ok := errors.AsType[*UnknownInstancesError](err); ok {
		return e.IDs
	}
	return nil
}
