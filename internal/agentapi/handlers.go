package agentapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// helloAttempts bounds hello's retries against concurrent writers of the row.
const helloAttempts = 5

// hello exchanges a machine's own bootstrap secret (domain.MachineSecret of
// its launch's and its cloud id, checked against the hash on the row found
// by that cloud id, so a sibling's secret or the launch's never matches)
// for the instance's own token, once. The token's hash goes on the row with
// a guarded in-place rewrite, so of two concurrent hellos one wins and the
// other finds the token issued, unless it is a retry proposing the secret
// the winner proposed. The token names its instance (issueToken), so the
// agent's first call, which follows at once, is checked on a read of the
// row by id, on whichever server it reaches.
func (s *Server) hello(w http.ResponseWriter, r *http.Request) (any, error) {
	var req HelloRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if err := missing([2]string{"cloud_id", req.CloudID}, [2]string{"launch_id", req.LaunchID},
		[2]string{"bootstrap", req.Bootstrap}); err != nil {
		return nil, err
	}
	if req.Token != "" && !domain.ValidSecret(req.Token) {
		return nil, badRequest("token: a proposed token's secret is 64 lowercase hex digits")
	}
	if s.identity != nil {
		if err := s.identity.Verify(req.CloudID, req.IdentityDocument, req.IdentitySignature); err != nil {
			s.log.Warn("agent hello refused: the machine's identity proof does not hold", "cloud_id", req.CloudID, "err", err)
			// The reason (another account, another region) stays in the
			// log: the caller has shown no right to know this stack's.
			return nil, fail(http.StatusUnauthorized, CodeUnauthorized,
				"identity proof refused: the identity document and its signature do not prove the machine %s", domain.QuoteShort(req.CloudID))
		}
	}
	for range helloAttempts {
		in, err := s.helloCandidate(r.Context(), req)
		if err != nil {
			return nil, err
		}
		if in.AgentTokenHash != "" { // a retry of the hello that was issued this token
			token := issuedTo(in, req.Token)
			s.rememberIssued(token, in)
			s.log.Info("agent said hello again; its token stands", "instance", in.ID, "cloud_id", in.CloudID)
			return s.helloResponse(in, token), nil
		}
		token := issueToken(in.ID, cmp.Or(req.Token, domain.NewSecret()))
		issue := domain.Lifecycle{}.IssueToken(in, domain.HashSecret(token))
		issued, err := s.store.Transition(r.Context(), issue.ID, issue.Guard, issue.Apply)
		if errors.Is(err, domain.ErrConflict) {
			continue // the row moved on: decide again on what it is now
		}
		if err != nil {
			return nil, fmt.Errorf("issue agent token for %s: %w", in.ID, err)
		}
		s.rememberIssued(token, issued)
		s.log.Info("agent said hello", "instance", in.ID, "cloud_id", in.CloudID, "state", in.State)
		return s.helloResponse(in, token), nil
	}
	return nil, errors.New("hello: the instance keeps changing")
}

// rememberIssued keeps in as the instance of the token hello gives. A token
// naming its instance needs nothing more; a bare one, given back to a hello
// retried across the upgrade to named tokens, is then read by id here
// rather than looked up in the store's index, which may not hold it yet.
// It is kept as not yet checked, so that the agent's first call reads the
// row: an instance that ended before that call has its token refused, as
// on every later one.
func (s *Server) rememberIssued(token string, in domain.Instance) {
	s.remember(domain.HashSecret(token), owner{in: in})
}

func (s *Server) helloResponse(in domain.Instance, token string) HelloResponse {
	return HelloResponse{Token: token, InstanceID: in.ID, HeartbeatSeconds: int(HeartbeatEvery / time.Second)}
}

// helloCandidate returns the row a hello may issue a token for, or why not.
func (s *Server) helloCandidate(ctx context.Context, req HelloRequest) (domain.Instance, error) {
	rows, err := s.store.ListInstances(ctx, domain.InstanceFilter{CloudID: req.CloudID})
	if err != nil {
		return domain.Instance{}, fmt.Errorf("hello: %w", err)
	}
	if len(rows) == 0 {
		// The row is written before the cloud call and learns its cloud id
		// when the call returns: a fast machine can be here first.
		return domain.Instance{}, fail(http.StatusServiceUnavailable, CodeUnavailable,
			"no instance with cloud id %q is recorded yet; retry", req.CloudID)
	}
	var in domain.Instance
	found := false
	for _, row := range rows {
		if row.LaunchID == req.LaunchID {
			in, found = row, true // the newest row of that launch
		}
	}
	if !found || !hashMatches(in.BootstrapHash, req.Bootstrap) {
		s.log.Warn("agent hello refused: bootstrap credentials do not match", "cloud_id", req.CloudID)
		return domain.Instance{}, fail(http.StatusUnauthorized, CodeUnauthorized, "bootstrap credentials do not match")
	}
	if ended(in.State) || in.State == domain.StateError {
		return domain.Instance{}, fail(http.StatusUnauthorized, CodeInstanceEnded, "instance is %s", in.State)
	}
	if in.AgentTokenHash != "" && issuedTo(in, req.Token) == "" {
		s.log.Warn("agent hello refused: token already issued", "instance", in.ID, "cloud_id", in.CloudID)
		return domain.Instance{}, fail(http.StatusConflict, CodeTokenIssued, "a token was already issued for this instance")
	}
	return in, nil
}

// issuedTo returns the token in was issued if secret is its secret, or "".
// A token issued before tokens named their instance is the secret itself:
// a hello retried across an upgrade is given it back as it was.
func issuedTo(in domain.Instance, secret string) string {
	if secret == "" {
		return ""
	}
	for _, token := range []string{issueToken(in.ID, secret), secret} {
		if hashMatches(in.AgentTokenHash, token) {
			return token
		}
	}
	return ""
}

func (s *Server) heartbeat(_ http.ResponseWriter, r *http.Request) (any, error) {
	in, err := s.authenticateWithin(r, HeartbeatAuthFresh)
	if err != nil {
		return nil, err
	}
	return nil, s.api.Heartbeat(r.Context(), in.CloudID)
}

// parseWait reads next's wait parameter: a Go duration ("30s") or seconds
// ("30"); absent means answer at once. It is capped at MaxWait.
func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, badRequest("wait: %q is not a duration (30s) or a number of seconds", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, badRequest("wait: %q is negative", v)
	}
	return min(d, MaxWait), nil
}

// next answers with the instance's instruction; while that is "wait", it
// holds the request up to the wait asked for, and answers at once when
// Assigned says there is something new.
func (s *Server) next(_ http.ResponseWriter, r *http.Request) (any, error) {
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		return nil, err
	}
	mark := s.waiters.mark()
	in, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	if s.draining() {
		wait = 0
	}
	ctx := r.Context()
	var timeout <-chan struct{} // none without a wait: nil is never ready
	if wait > 0 {
		ch, stop := clock.Closes(s.clk, wait)
		defer stop()
		timeout = ch
		s.metrics.longPolls.Inc()
		defer s.metrics.longPolls.Dec()
	}
	for {
		// Subscribe before asking, so a notice that comes between the
		// answer and the wait is not lost. The answer is decided on the
		// reading that checked the token, or that the last notice brought;
		// when a notice came after that reading and before this
		// subscription, the row is read again.
		sub := s.waiters.subscribe(in.CloudID)
		if s.waiters.wokenSince(in.CloudID, mark) {
			fresh, err := s.recheck(ctx, in.ID)
			if err != nil {
				s.waiters.unsubscribe(in.CloudID, sub)
				return nil, err
			}
			in = fresh
		}
		ins, err := s.api.NextFor(ctx, in)
		if err != nil || ins.Kind != domain.InstructionWait || wait == 0 {
			s.waiters.unsubscribe(in.CloudID, sub)
			return instruction(ins), err
		}
		select {
		case <-sub.ch:
		case <-timeout:
			s.waiters.unsubscribe(in.CloudID, sub)
			return instruction(ins), nil
		case <-ctx.Done():
			s.waiters.unsubscribe(in.CloudID, sub)
			return nil, ctx.Err()
		case <-s.drained:
			s.waiters.unsubscribe(in.CloudID, sub)
			return nil, fail(http.StatusServiceUnavailable, CodeUnavailable, "the control plane is shutting down; retry")
		}
		// The instance may have ended while its agent waited.
		mark = s.waiters.mark()
		if in, err = s.recheck(ctx, in.ID); err != nil {
			return nil, err
		}
	}
}

// recheck re-reads the caller's row: its token expires with it.
func (s *Server) recheck(ctx context.Context, id string) (domain.Instance, error) {
	in, err := s.store.GetInstance(ctx, id)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && ended(in.State)) {
		return domain.Instance{}, fail(http.StatusUnauthorized, CodeInstanceEnded, "token expired with its instance")
	}
	return in, err
}

func instruction(ins domain.Instruction) Instruction {
	out := Instruction{Kind: string(ins.Kind)}
	if ins.Kind == domain.InstructionRun {
		a := ins.Assignment
		out.JobID, out.Job, out.RunnerName, out.JITConfig = a.JobID, domain.JobKey(a.JobID), a.RunnerName, a.JITConfig
	}
	return out
}

// signalKinds are the signals an agent may send, and whether each must
// name its job. Heartbeats have their own endpoint.
var signalKinds = map[domain.SignalKind]bool{
	domain.SignalWarm:         false,
	domain.SignalRegistered:   true,
	domain.SignalJobStarted:   true,
	domain.SignalJobFinished:  true,
	domain.SignalDeregistered: false,
	domain.SignalFailed:       false,
	domain.SignalInterrupted:  false,
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) (any, error) {
	in, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	var req SignalRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if err := validSignal(req); err != nil {
		return nil, err
	}
	err = s.api.SignalFor(r.Context(), in, domain.Signal{
		CloudID: in.CloudID, Kind: domain.SignalKind(req.Kind), Job: req.Job, Reason: req.Reason, At: s.clk.Now(),
	})
	if errors.Is(err, domain.ErrRejected) {
		s.log.Info("agent signal rejected", "instance", in.ID, "kind", req.Kind, "job", req.Job, "err", err)
		return nil, fail(http.StatusConflict, CodeRejected, "%v", err)
	}
	return nil, err
}

func validSignal(req SignalRequest) error {
	if err := missing([2]string{"kind", req.Kind}); err != nil {
		return err
	}
	needsJob, known := signalKinds[domain.SignalKind(req.Kind)]
	if !known {
		return badRequest("kind: unknown signal %q (want warm, registered, job-started, job-finished, deregistered, failed or interrupted)", req.Kind)
	}
	if needsJob && req.Job == "" {
		return badRequest("missing field(s): job (a %s signal names its job)", req.Kind)
	}
	if req.Job != "" {
		if _, err := domain.ParseJobKey(req.Job); err != nil {
			return badRequest("job: %v", err)
		}
	}
	if len(req.Reason) > MaxReason {
		return badRequest("reason: longer than %d bytes", MaxReason)
	}
	return nil
}
