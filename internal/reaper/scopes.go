package reaper

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// lookAtScopes deregisters dead runners and reads the queued jobs of every
// scope, counting each scope's outcome in rep. A scope GitHub fails to
// answer for (a permission taken back, an outage of one account) is
// logged and counted, and fails the step only when every scope of the
// cycle failed: one bad account must not keep the reaper, and the health
// of every replica, failing for as long as it lasts. A 404 is such a
// failure: GitHub answers it for a repository the credentials cannot see
// (dropped from the App's selection, a token that lost access) as for a
// deleted one, and taking it for the latter would let every scope go dark
// with the step, and the health, still green. Only a scope GitHub says is
// gone for good (410) fails nothing. The store's and the queue's errors
// fail the step as every step's do.
func (r *Reconciler) lookAtScopes(ctx context.Context, rows []domain.Instance, rejected *rejectedCycle, rep *Report) error {
	scopes := r.scopes(ctx)
	var errs, failures []error
	// Scopes that share their runners' home (an enterprise's) list them
	// once; the listing's outcome is the first such scope's.
	listed := map[domain.Scope]bool{}
	for _, s := range scopes {
		var ghErrs []error
		if home := s.Runners(); !listed[home] {
			listed[home] = true
			n, ghErr, err := r.deadRunners(ctx, home, rows)
			rep.DeadRunners += n
			ghErrs = append(ghErrs, ghErr)
			errs = append(errs, err)
		}
		ghErr, err := r.queuedJobs(ctx, s, rejected, rep)
		errs = append(errs, err)
		ghErrs = append(ghErrs, ghErr)
		switch failed, gone := scopeOutcome(ghErrs); {
		case failed != nil && errors.Is(failed, domain.ErrNotFound):
			rep.Scopes.Failed++
			failures = append(failures, failed)
			r.Log.Warn("GitHub does not find this scope: the credentials may have lost access to it (a repository dropped from the App's selection, a token's access taken back), or it was deleted; the others go on",
				"scope", s.String(), "err", failed)
		case failed != nil:
			rep.Scopes.Failed++
			failures = append(failures, failed)
			r.Log.Warn("GitHub failed to answer for a scope; the others go on", "scope", s.String(), "err", failed)
		case gone != nil:
			rep.Scopes.Gone++
			r.Log.Info("GitHub says this scope is gone (410); skipped", "scope", s.String(), "err", gone)
		default:
			rep.Scopes.OK++
		}
	}
	if len(failures) > 0 && len(failures) == len(scopes) {
		errs = append(errs, allScopesFailed(failures))
	}
	return errors.Join(errs...)
}

// scopeOutcome sorts the errors GitHub gave for one scope: failed joins
// those that are failures; gone, when there are none, those saying GitHub
// no longer has what was asked for.
func scopeOutcome(errs []error) (failed, gone error) {
	var fails, gones []error
	for _, err := range errs {
		switch {
		case err == nil:
		case isGone(err):
			gones = append(gones, err)
		default:
			fails = append(fails, err)
		}
	}
	return errors.Join(fails...), errors.Join(gones...)
}

// isGone reports whether err is GitHub's 410, saying a scope's repository
// or organisation is gone for good. The REST client maps 404 to the same
// domain.ErrNotFound, so the status is read from its answer: a 404 cannot
// tell a deleted repository from one the credentials no longer see.
func isGone(err error) bool {
	var answer *rest.APIError
	return errors.As(err, &answer) && answer.Status == http.StatusGone
}

// allScopesFailed is the step's error when no scope was answered for: the
// first failure stands for the others, which were logged.
func allScopesFailed(failures []error) error {
	if len(failures) == 1 {
		return failures[0]
	}
	return fmt.Errorf("GitHub failed to answer for all %d scopes; the first: %w", len(failures), failures[0])
}
