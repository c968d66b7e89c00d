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

// UnknownIDs returns the ids an error names as unknown, or nil: those of
// an *UnknownInstancesError, or the Unknown of a *RefusedInstancesError.
func UnknownIDs(err error) []string {
	if e, ok := errors.AsType[*UnknownInstancesError](err); ok {
		return e.IDs
	}
	if e, ok := errors.AsType[*RefusedInstancesError](err); ok {
		return e.Unknown
	}
	return nil
}

// RefusedInstancesError names the machines of a batch call that the cloud
// refused to act on although they exist: one protected from termination,
// one still stopping that cannot be started yet, one the call does not
// apply to. The call acted on every other id, except those named in
// Unknown, which it skipped as an *UnknownInstancesError would name them.
// It does not wrap ErrUnknownInstance: a terminate that left a machine
// running is not done (TerminateDone), and asking again at once is refused
// the same way until someone or something changes the machine.
type RefusedInstancesError struct {
	Op      string
	Code    string // the provider's code for the refusal
	IDs     []string
	Unknown []string
	Reason  string // the provider's message for the first refusal
}

func (e *RefusedInstancesError) Error() string {
	msg := fmt.Sprintf("%s: refused for instances %s (%s)", e.Op, strings.Join(e.IDs, ", "), e.Reason)
	if len(e.Unknown) > 0 {
		msg += "; unknown instances " + strings.Join(e.Unknown, ", ")
	}
	return msg
}

// RefusedIDs returns the ids an error names as refused, or nil.
func RefusedIDs(err error) []string {
	if e, ok := errors.AsType[*RefusedInstancesError](err); ok {
		return e.IDs
	}
	return nil
}

// NotActedOn reads the error of a batch call (Start, Stop, Terminate,
// Tag): named reports whether err names the ids the call did not act on
// (unknown or refused), which are ids; the call then acted on every other
// id. When named is false, err is about the whole call, and no id can be
// counted as acted on; for a nil err, every id was.
func NotActedOn(err error) (ids []string, named bool) {
	if err == nil {
		return nil, true
	}
	refused, unknown := RefusedIDs(err), UnknownIDs(err)
	if len(refused) == 0 && len(unknown) == 0 {
		return nil, false
	}
	return append(slices.Clone(refused), unknown...), true
}
