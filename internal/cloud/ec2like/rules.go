package ec2like

import "github.com/bullpen-ci/bullpen/internal/domain"

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
// refused) and changes nothing; otherwise it calls change for each machine
// the rules move, in order, and skips the others.
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
			return Errorf(op, CodeIncorrectState, domain.ErrInvalidRequest,
				"instance %s is %s", inst.ID, inst.State)
		}
	}
	for _, m := range todo {
		change(m)
	}
	return nil
}
