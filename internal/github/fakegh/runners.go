package fakegh

import (
	"errors"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// AddRunner registers a runner as `config.sh` would and returns its id.
func (s *Server) AddRunner(spec RunnerSpec) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account(spec.Scope.Owner)
	if spec.Scope.Repo != "" {
		s.repo(spec.Scope.String())
	}
	r := s.newRunner(spec.Scope, spec.Name, spec.Labels)
	r.online, r.busy, r.ephemeral, r.started = spec.Online, spec.Busy, spec.Ephemeral, spec.Online
	return r.id
}

func (s *Server) newRunner(scope domain.Scope, name string, labels []string) *runner {
	s.lastID++
	r := &runner{id: s.lastID, owner: scope.Owner, repo: scope.Repo, enterprise: strings.ToLower(scope.Enterprise), name: name, labels: slices.Clone(labels)}
	s.runners[r.id] = r
	return r
}

// ErrUnknownJITConfig is RunJIT's answer to a config no runner has.
var ErrUnknownJITConfig = errors.New("fakegh: unknown or used JIT config")

// RunJIT is a runner process starting from a JIT config: the runner goes
// online and takes the oldest queued job its labels cover (every label of
// the job is one of the runner's, case-insensitively, within its scope),
// returning the job's id, or 0 when none matches yet; it then takes the
// first matching job queued later. A config works once.
func (s *Server) RunJIT(jitConfig string) (jobID int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rn *runner
	for _, r := range s.runners {
		if r.jit != "" && r.jit == jitConfig && !r.started {
			rn = r
		}
	}
	if rn == nil {
		return 0, ErrUnknownJITConfig
	}
	rn.started, rn.online = true, true
	var take *job
	_, own, named := domain.ParseRunnerName(rn.name)
	for _, j := range byID(s.jobs) {
		if j.status != "queued" || !rn.serves(j) {
			continue
		}
		if take == nil || (s.othersFirst && named && take.id == own) {
			take = j
		}
	}
	if take == nil {
		return 0, nil
	}
	s.start(take, rn.name, rn)
	return take.id, nil
}

// waitingRunnerFor returns the JIT runner process waiting for work that
// may take j, if any.
func (s *Server) waitingRunnerFor(j *job) *runner {
	for _, r := range byID(s.runners) {
		if r.jit != "" && r.started && r.online && r.job == nil && r.serves(j) {
			return r
		}
	}
	return nil
}

func (r *runner) covers(rp *repo) bool {
	if r.enterprise != "" {
		return r.enterprise == rp.owner.enterprise
	}
	return strings.EqualFold(r.owner, rp.owner.login) && (r.repo == "" || strings.EqualFold(r.repo, rp.name))
}

func (r *runner) serves(j *job) bool {
	if !r.covers(j.run.repo) {
		return false
	}
	have := r.allLabels()
	for _, want := range j.labels {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, want) }) {
			return false
		}
	}
	return true
}

// allLabels are the runner's labels as GitHub lists them: the default
// "self-hosted" first, then the custom ones.
func (r *runner) allLabels() []string {
	out := []string{"self-hosted"}
	for _, l := range r.labels {
		if !strings.EqualFold(l, "self-hosted") {
			out = append(out, l)
		}
	}
	return out
}

// Runners lists every registered runner, by id.
func (s *Server) Runners() []domain.GitHubRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []domain.GitHubRunner
	for _, r := range byID(s.runners) {
		out = append(out, domain.GitHubRunner{ID: r.id, Name: r.name, Online: r.online, Busy: r.busy, Labels: r.allLabels()})
	}
	return out
}
