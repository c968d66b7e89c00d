package domain

import (
	"context"
	"errors"
	"time"
)

// Scope is where runners register: an organisation (Repo empty) or one
// repository; or, with Enterprise set, the enterprise, whose runners serve
// the jobs of every organisation in it that their runner group admits.
// GitHub lists no jobs of an enterprise, so an enterprise scope that is
// also asked for jobs names the organisation or repository to look in.
// OrgRunners likewise says that a repository's runners are its
// organisation's: jobs are looked for in the repository, where listing a
// whole organisation's costs three calls for every repository in it.
type Scope struct {
	Enterprise string
	Owner      string
	Repo       string
	OrgRunners bool
}

// String renders the scope as GitHub paths do: "org" or "owner/repo", or
// "enterprise SLUG" (followed by the jobs' owner or repository, if any).
func (s Scope) String() string {
	where := s.Owner
	if s.Repo != "" {
		where += "/" + s.Repo
	}
	if s.Enterprise == "" {
		return where
	}
	if where == "" {
		return "enterprise " + s.Enterprise
	}
	return "enterprise " + s.Enterprise + " (" + where + ")"
}

// Runners is where the scope's runners are registered and listed: its
// enterprise when it has one, its organisation with OrgRunners, else the
// scope itself.
func (s Scope) Runners() Scope {
	switch {
	case s.Enterprise != "":
		return Scope{Enterprise: s.Enterprise}
	case s.OrgRunners:
		return Scope{Owner: s.Owner}
	}
	return s
}

// RunnerRegistration is a just-in-time runner registered for one job.
type RunnerRegistration struct {
	RunnerID  int64
	Name      string
	JITConfig string // a credential: never log it
}

// GitHubRunner is a self-hosted runner as GitHub lists it.
type GitHubRunner struct {
	ID     int64
	Name   string
	Online bool
	Busy   bool
	Labels []string
}

// GitHubJob is a workflow job as GitHub reports it.
type GitHubJob struct {
	ID         int64
	RunID      int64
	RunAttempt int
	Repo       string // owner/name
	Name       string
	Workflow   string
	Status     string // queued, waiting, in_progress, completed
	Conclusion string
	Labels     []string
	RunnerName string
	CreatedAt  time.Time
}

// GitHub is the GitHub API as bullpen uses it. Every implementation runs the
// contract suite in internal/github/githubtest.
type GitHub interface {
	// RegisterRunner creates a just-in-time runner with these labels;
	// ErrExists when the name is taken in the scope (GitHub answers 409).
	RegisterRunner(ctx context.Context, s Scope, name string, labels []string) (RunnerRegistration, error)
	ListRunners(ctx context.Context, s Scope) ([]GitHubRunner, error)
	// DeleteRunner removes a runner; ErrRunnerBusy when it is running a job
	// (GitHub answers 422), ErrNotFound when it is already gone.
	DeleteRunner(ctx context.Context, s Scope, id int64) error
	// QueuedJobs lists the jobs waiting for a runner in the scope, so a
	// missed webhook never leaves a job waiting.
	QueuedJobs(ctx context.Context, s Scope) ([]GitHubJob, error)
	GetJob(ctx context.Context, repo string, id int64) (GitHubJob, error)
	CancelRun(ctx context.Context, repo string, runID int64) error
	// RerunJob asks GitHub to run a completed job again (a new attempt of
	// its run); ErrRunInProgress while its run has not completed, which
	// GitHub refuses.
	RerunJob(ctx context.Context, repo string, jobID int64) error
}

// GitHub errors.
var (
	ErrRunnerBusy  = errors.New("runner is busy")
	ErrRateLimited = errors.New("rate limited")
	// ErrRunInProgress: GitHub re-runs a job only once its run completed.
	// (An error wrapping ErrRateLimited may say when to try again: RetryAt.)
	ErrRunInProgress = errors.New("workflow run not completed")
)

// Assignment is what an instance's agent needs to serve its job.
type Assignment struct {
	JobID      int64
	RunnerName string
	Labels     []string
	JITConfig  string // a credential: never log it
}

// InstructionKind is what the control plane tells an agent to do next.
type InstructionKind string

const (
	// InstructionWait: nothing to do yet; ask again (or wait for a notice).
	InstructionWait InstructionKind = "wait"
	// InstructionRun: register a runner with the assignment and run the job.
	InstructionRun InstructionKind = "run"
	// InstructionRelease: the job is over and the instance will be reused:
	// deregister the runner, clean up, then signal deregistered.
	InstructionRelease InstructionKind = "release"
)

// Instruction is the control plane's answer to an agent's "what next?".
type Instruction struct {
	Kind       InstructionKind
	Assignment Assignment // with InstructionRun
}

// AgentAPI is the control plane as an instance's agent sees it: the HTTP
// agent API serves it to real agents, and simulated agents call it directly.
// Instances are named by their cloud id.
type AgentAPI interface {
	SignalSink
	// Heartbeat says the agent is alive.
	Heartbeat(ctx context.Context, cloudID string) error
	// Next says what the agent should do now.
	Next(ctx context.Context, cloudID string) (Instruction, error)
}

// AssignmentNotifier is told when an instance has a new instruction (a job
// to run, a release), so agents waiting for one wake at once.
type AssignmentNotifier interface {
	Assigned(cloudID string)
}

// IdentityVerifier checks a provider's signed proof that a machine is the
// one it says (EC2's instance identity document), before the control plane
// gives it a token. The error says why a proof is refused.
type IdentityVerifier interface {
	Verify(cloudID, document, signature string) error
}

// RetryAt is implemented by errors that know when a refused call may be
// made again (a rate limit's reset).
type RetryAt interface {
	RetryAt() time.Time
}
