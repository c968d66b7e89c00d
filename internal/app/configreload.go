package app

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// configReads is what the reads of the configuration source found. Each
// read is compared with the file in force and the file last refused, not
// with the read before: a source says what changed since its own last
// read, which after a failed read, or a start on a configuration parsed
// elsewhere, is not what is in force nor what the dashboard shows.
type configReads struct {
	inForce  []byte // the file in force, when known
	known    bool   // false: the configuration was given, and no read of the source matched it
	loadedAt time.Time
	// refused is the newest file read when it does not validate.
	refused *refusedConfig
	// unreadable: the last read failed, and the dashboard shows why.
	unreadable bool
	// unreadableSince and unreadableErr are the first of the failed reads
	// in a row that failed the same way: the dashboard shows that time, so
	// that the same failure, repeated, is not a change.
	unreadableSince time.Time
	unreadableErr   string
	// pausedUntil is when GitHub's rate limit lets the source be read
	// again.
	pausedUntil time.Time
	// settling is the newer file last found waiting to settle, as the
	// source described it, so that each version is logged once.
	settling string
}

// refusedConfig is a file that does not validate, as first read.
type refusedConfig struct {
	data []byte
	err  error
	at   time.Time
}

// reloadConfig reads the configuration and puts it in force when it is
// neither the file in force nor the one last refused; one that does not
// validate is reported and the configuration in force kept. A source that
// cannot be read is reported without failing the step: every replica
// reads the same source, and the configuration in force is still valid,
// so failing would take all of them out of service at once. The loop and
// pushes to a configuration repository call it.
func (a *App) reloadConfig(ctx context.Context) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	now := a.opts.Clock.Now()
	if now.Before(a.configReads.pausedUntil) {
		// Still unread: counted, so that an alert on unreadable reads
		// holds for as long as GitHub makes them wait.
		a.configReloads.count(reloadUnreadable)
		return nil
	}
	data, _, err := a.source.Read(ctx)
	if errors.Is(err, configsource.ErrNotSettled) {
		a.configSettling(err)
		return nil
	}
	a.configReads.settling = ""
	if err != nil {
		return a.configUnreadable(err, now)
	}
	if cfg := a.configRead(ctx, data, now); cfg != nil {
		a.noteConfig(cfg, "configuration reloaded")
	}
	return nil
}

// configSettling notes a newer file that has not settled yet. It is
// neither unreadable nor refused, and not yet read: what the gauges and
// the dashboard show of the reads before stands until a read settles it.
func (a *App) configSettling(err error) {
	if st := &a.configReads; st.settling != err.Error() {
		st.settling = err.Error()
		a.opts.Log.Info("a newer file waits to settle", "path", a.source.Name(), "err", err)
	}
}

// configUnreadable reports a read of the source that failed; the
// configuration in force is kept. After a rate limit, the source is not
// read again before GitHub said.
func (a *App) configUnreadable(err error, now time.Time) error {
	name := a.source.Name()
	a.configReloads.count(reloadUnreadable)
	st := &a.configReads
	if !st.unreadable || st.unreadableErr != err.Error() {
		st.unreadableSince, st.unreadableErr = now, err.Error()
	}
	st.unreadable = true
	a.configs.Refused(name, nil, err, st.unreadableSince)
	if a.Config() == nil {
		return fmt.Errorf("configuration %s unreadable: %w", name, err)
	}
	var retry domain.RetryAt
	if errors.As(err, &retry) && retry.RetryAt().After(now) {
		a.configReads.pausedUntil = retry.RetryAt()
		a.opts.Log.Warn("configuration unreadable for GitHub's rate limit; keeping the one in force", "path", name,
			"until", a.configReads.pausedUntil.UTC().Format(time.RFC3339), "err", err)
		return nil
	}
	a.opts.Log.Warn("configuration unreadable; keeping the one in force", "path", name, "err", err)
	return nil
}

// configRead acts on a file read from the source, and returns the
// configuration it put in force, nil when none.
func (a *App) configRead(ctx context.Context, data []byte, now time.Time) *config.Config {
	st, name := &a.configReads, a.source.Name()
	wasUnreadable := st.unreadable
	st.unreadable = false
	a.configReloads.readable()
	switch {
	case st.known && bytes.Equal(data, st.inForce):
		if st.refused != nil || wasUnreadable {
			st.refused = nil
			a.configReloads.backInForce()
			a.configs.Loaded(name, st.inForce, a.Config(), st.loadedAt)
			a.opts.Log.Info("configuration read again is the one in force", "path", name)
		}
		return nil
	case st.refused != nil && bytes.Equal(data, st.refused.data):
		if wasUnreadable {
			// The read error replaced the file's problems on the
			// dashboard; it is counted and logged already.
			a.configs.Refused(name, st.refused.data, st.refused.err, st.refused.at)
		}
		return nil
	}
	cfg, err := a.parseConfig(name, data) // an empty file (a write caught midway) is refused too
	if err != nil {
		a.refuseConfig(data, err, now)
		return nil
	}
	a.putConfigInForce(ctx, data, cfg, now)
	a.configReloads.count(reloadLoaded)
	return cfg
}

// parseConfig parses a configuration read from the source, and refuses
// one whose autoscaling this stack's converger could not carry out (its
// polls come only on cycles), as serve refuses it at start: put in force
// by a reload, it would never scale, and the next restart would stop.
func (a *App) parseConfig(name string, data []byte) (*config.Config, error) {
	cfg, err := config.Parse(name, data)
	if err != nil {
		return nil, err
	}
	every := cmp.Or(a.opts.Converger.Interval, converger.DefaultInterval)
	if err := cfg.CheckCadence(cfg.PoolsFor(a.opts.Environment), every); err != nil {
		return nil, fmt.Errorf("with a converger cycle of %v: %w", every, err)
	}
	return cfg, nil
}

// refuseConfig reports a file that does not validate; the configuration
// in force is kept. A human must fix the file: reading the same bytes
// again cannot help, so they are reported once.
func (a *App) refuseConfig(data []byte, err error, now time.Time) {
	name := a.source.Name()
	a.configReads.refused = &refusedConfig{data: slices.Clone(data), err: err, at: now}
	a.configReloads.count(reloadRefused)
	a.configs.Refused(name, data, err, now)
	a.opts.Log.Error("configuration invalid; keeping the one in force", "path", name, "problems", err.Error())
}

// putConfigInForce makes cfg, parsed from data, the configuration in
// force, and keeps its file in the store for a start that finds its
// source failing. A file the store cannot keep is logged and still put in
// force: only such a start would miss it.
func (a *App) putConfigInForce(ctx context.Context, data []byte, cfg *config.Config, now time.Time) {
	a.inForce(data, cfg, now)
	name := a.source.Name()
	if err := a.Store.PutConfiguration(ctx, domain.ConfigRecord{Source: name, Data: data, At: now}); err != nil {
		a.opts.Log.Warn("could not keep the configuration in force in the store; a replica starting while the source fails will not find it", "path", name, "err", err)
	}
}

// inForce makes cfg, parsed from data put in force at at, the
// configuration in force, as the reads and the dashboard know it.
func (a *App) inForce(data []byte, cfg *config.Config, at time.Time) {
	a.SetConfig(cfg)
	st := &a.configReads
	st.inForce, st.known, st.loadedAt, st.refused = slices.Clone(data), true, at, nil
	a.configs.Loaded(a.source.Name(), data, cfg, at)
}

// noteConfig logs what a configuration put in force serves, and each of
// its warnings with its place in the file: serve's log is where an
// operator sees that a key is ignored.
func (a *App) noteConfig(cfg *config.Config, msg string) {
	if cfg == nil {
		return
	}
	a.notePools(cfg, msg)
	for _, w := range cfg.Warnings {
		a.opts.Log.Warn("configuration warning", "path", a.sourceName(), "line", w.Line, "col", w.Col, "warning", w.Msg)
	}
}
