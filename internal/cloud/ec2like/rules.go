package ec2like

import (
	"errors"
	"fmt"
	"slices"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Verdict is what a batch state change does to a machine in a given state.
type Verdict int

const (
	Refuse Verdict = iota // IncorrectInstanceState: the whole call fails
	Change                // the machine changes state
	Skip                  // already there or on its way: succeed, do nothing
)

// Rules is EC2's table for one batch state change, by the machine's
// current state. A state missing from the table is refused.
type Rules struct {
	verdicts map[domain.CloudState]Verdict
}

// The rules of StartInstances, StopInstances and TerminateInstances. A
// pending machine cannot be stopped, as on EC2.
var (
	StartRules = Rules{map[domain.CloudState]Verdict{
		domain.CloudStopped: Change,
		domain.CloudPending: Skip,
		domain.CloudRunning: Skip,
	}}
	StopRules = Rules{map[domain.CloudState]Verdict{
		domain.CloudRunning:  Change,
		domain.CloudStopping: Skip,
		domain.CloudStopped:  Skip,
	}}
	TerminateRules = Rules{map[domain.CloudState]Verdict{
		domain.CloudPending:      Change,
		domain.CloudRunning:      Change,
		domain.CloudStopping:     Change,
		domain.CloudStopped:      Change,
		domain.CloudShuttingDown: Skip,
		domain.CloudTerminated:   Skip,
	}}
)

// Verdict returns what the change does to a machine in state s.
func (r Rules) Verdict(s domain.CloudState) Verdict { return r.verdicts[s] }

// Changes reports whether the change moves a machine in state s.
func (r Rules) Changes(s domain.CloudState) bool { return r.Verdict(s) == Change }

// Apply makes a batch state change all or nothing: it resolves ids with
// lookup, and when lookup fails or the rules refuse any of the machines, it
// returns the error (IncorrectInstanceState naming the first machine
// refused, as Refusal makes it) and changes nothing; otherwise it calls
// change for each machine the rules move, in order, and skips the others.
func Apply[M Machine](op string, ids []string, lookup Lookup[M], rules Rules, change func(M)) error {
	ms, err := lookup(op, ids)
	if err != nil {
		return err
	}
	todo := make([]M, 0, len(ms))
	for _, m := range ms {
		inst := m.Instance()
		switch rules.Verdict(inst.State) {
		case Change:
			todo = append(todo, m)
		case Refuse:
			return Refusal(op, CodeIncorrectState, domain.ErrInvalidRequest, inst.ID,
				"instance %s is %s", inst.ID, inst.State)
		}
	}
	for _, m := range todo {
		change(m)
	}
	return nil
}

// refusal is what a call refused over one machine says, with the
// machine's id, so that SkipRefused can take it out without reading the
// message.
type refusal struct {
	id     string
	reason string // the message, without the sentinel
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// Refusal is the error of a batch call refused over the machine id, with
// EC2's code, the sentinel callers branch on (none when nil) and a message
// saying why.
func Refusal(op, code string, sentinel error, id, format string, args ...any) *domain.CloudError {
	reason := fmt.Sprintf(format, args...)
	err := errors.New(reason)
	if sentinel != nil {
		err = fmt.Errorf("%w: %s", sentinel, reason)
	}
	return &domain.CloudError{Op: op, Code: code, Err: &refusal{id: id, reason: reason, err: err}}
}

// SkipRefused makes a batch call as bullpen's EC2 provider does: when EC2
// refuses the whole call over a machine it names (see Refusal), the
// machine is taken out and the call made again on the others, until one
// goes through. Of the machines taken out, those terminated or shutting
// down (as lookup finds them after the last call) are gone, and reported
// with the unknown ids as an *domain.UnknownInstancesError; any other is
// named in a *domain.RefusedInstancesError with EC2's first code and
// reason. An error of another kind ends the call as it is.
func SkipRefused[M Machine](op string, ids []string, lookup Lookup[M], call func(ids []string) error) error {
	var refused []string
	var first *refusal
	var code string
	var err error
	for {
		err = call(ids)
		r, ok := errors.AsType[*refusal](err)
		if !ok || !slices.Contains(ids, r.id) {
			break
		}
		if first == nil {
			first, code = r, codeOf(err)
		}
		refused = append(refused, r.id)
		// A new slice: the one the call was given may still be read.
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == r.id })
		if len(ids) == 0 {
			err = nil
			break
		}
	}
	if len(refused) == 0 || (err != nil && !errors.Is(err, domain.ErrUnknownInstance)) {
		return err
	}
	unknown := slices.Clone(domain.UnknownIDs(err))
	var still []string
	ms, lerr := lookup(op, refused)
	if lerr != nil {
		// Not described: gone if named as unknown, else refused as asked.
		for _, id := range refused {
			if slices.Contains(domain.UnknownIDs(lerr), id) {
				unknown = append(unknown, id)
			} else {
				still = append(still, id)
			}
		}
	}
	for _, m := range ms {
		switch inst := m.Instance(); inst.State {
		case domain.CloudTerminated, domain.CloudShuttingDown:
			unknown = append(unknown, inst.ID)
		default:
			still = append(still, inst.ID)
		}
	}
	if len(still) == 0 {
		return &domain.CloudError{Op: op, Code: code, Err: &domain.UnknownInstancesError{Op: op, IDs: unknown}}
	}
	return &domain.CloudError{Op: op, Code: code, Err: &domain.RefusedInstancesError{
		Op: op, Code: code, IDs: still, Unknown: unknown, Reason: first.reason}}
}

// codeOf is the code of the provider's error, "" for none.
func codeOf(err error) string {
	if ce, ok := errors.AsType[*domain.CloudError](err); ok {
		return ce.Code
	}
	return ""
}
