package simagent

import "time"

// Faults are injected per machine, by cloud id, and may be set before the
// machine first runs. NeverWarm, FailRegistration, SilenceHeartbeats and
// RegisterDelayFor are traits of the machine and hold across restarts;
// Crash kills only the agent running now, and the next start of the
// machine brings a fresh one.

// NeverWarm makes the machine's agent never report warm (and so never ask
// for work); it keeps heartbeating.
func (f *Fleet) NeverWarm(cloudID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mc := f.machine(cloudID)
	mc.neverWarm = true
	if a := mc.agent; a != nil && a.phase == phaseBooting {
		stop(&a.step)
	}
}

// FailRegistration makes every registration on the machine fail with
// reason (InjectedRegistrationFailure when empty): the agent reports
// failed instead of starting a runner.
func (f *Fleet) FailRegistration(cloudID, reason string) {
	if reason == "" {
		reason = InjectedRegistrationFailure
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machine(cloudID).failReason = reason
}

// SilenceHeartbeats stops the machine's heartbeats; the agent otherwise
// carries on.
func (f *Fleet) SilenceHeartbeats(cloudID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mc := f.machine(cloudID)
	mc.silent = true
	if a := mc.agent; a != nil {
		stop(&a.heartbeat)
	}
}

// Crash kills the machine's agent silently: no more heartbeats or signals,
// while the machine keeps running. It reports whether an agent was running.
func (f *Fleet) Crash(cloudID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	mc := f.machines[cloudID]
	if mc == nil || mc.agent == nil {
		return false
	}
	mc.agent.kill()
	mc.agent = nil
	return true
}

// RegisterDelayFor sets how long registrations on the machine take, in
// place of Options.RegisterDelay (negative means none).
func (f *Fleet) RegisterDelayFor(cloudID string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mc := f.machine(cloudID)
	mc.registerDelay, mc.delaySet = max(d, 0), true
}
