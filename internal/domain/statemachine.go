package domain

import "slices"

// stateMachine is an explicit state machine: each known state and the
// states it may move to. Instances and jobs each have one.
type stateMachine[S comparable] map[S][]S

// known reports whether s is one of the machine's states.
func (m stateMachine[S]) known(s S) bool {
	_, ok := m[s]
	return ok
}

// allows reports whether from → to is allowed: both states are known, and
// to is one from may move to, or from itself (a rewrite in place, other
// fields) unless final says nothing may follow from.
func (m stateMachine[S]) allows(from, to S, final func(S) bool) bool {
	next, ok := m[from]
	if !ok || !m.known(to) {
		return false
	}
	if from == to {
		return !final(from)
	}
	return slices.Contains(next, to)
}
