// Package agentapi serves the agent API (/agent/v1/) to the agents running
// on bullpen's instances: hello (a machine's own bootstrap secret exchanged
// once for the instance's own token), heartbeats, a long poll for the next
// instruction, and signals. The token is the caller's identity: every call
// acts for the one instance whose row holds the token's hash, so an agent
// can neither read nor change another instance. A token is
// "<instance id>.<secret>": naming the row it is checked against lets the
// server read that row by id, never through an index that may lag.
package agentapi

import "time"

// Paths of the agent API, relative to the control plane's base URL.
const (
	Prefix        = "/agent/v1/"
	PathHello     = Prefix + "hello"
	PathHeartbeat = Prefix + "heartbeat"
	PathNext      = Prefix + "next"
	PathSignal    = Prefix + "signal"
)

// Limits of the API.
const (
	// MaxBody is the largest request body accepted (413 beyond it).
	MaxBody = 64 << 10
	// MaxWait is the longest a long poll is held open.
	MaxWait = 60 * time.Second
	// MaxReason is the longest reason a signal may carry.
	MaxReason = 2048
	// HeartbeatEvery is the heartbeat interval hello tells agents.
	HeartbeatEvery = 5 * time.Second
	// RetryAfter is the Retry-After (seconds) of 503 answers.
	RetryAfter = 2
)

// HelloRequest introduces a new machine: its cloud id, its launch, and its
// own bootstrap secret (from its launch data, or derived from the launch's
// secret there).
type HelloRequest struct {
	CloudID   string `json:"cloud_id"`
	LaunchID  string `json:"launch_id"`
	Bootstrap string `json:"bootstrap"`
	// The provider's signed proof of which machine asks, where it gives
	// one: on EC2 the instance identity document and its base64 RSA-SHA256
	// signature, from the metadata service.
	IdentityDocument  string `json:"identity_document,omitempty"`
	IdentitySignature string `json:"identity_signature,omitempty"`
	// Token, when set, is the secret of the token the agent asks to be
	// issued: 64 hex digits it drew at random. A hello whose answer was
	// lost (a timeout, a balancer's error) can then be retried: the retry
	// proposing the same secret gets the same token, while any other hello
	// still finds the token issued. Without it the server draws the secret.
	Token string `json:"token,omitempty"`
}

// HelloResponse carries the instance's token, "<instance id>.<secret>"
// (tokens issued before that form are the bare secret): given once, and
// again only to a retry proposing that same secret. Agents present it as
// it is, without taking it apart.
type HelloResponse struct {
	Token            string `json:"token"`
	InstanceID       string `json:"instance_id"`
	HeartbeatSeconds int    `json:"heartbeat_seconds"`
}

// Instruction is the answer to GET next: what the agent does now. Job is
// the job's key, to be echoed in the signals about it.
type Instruction struct {
	Kind       string `json:"kind"` // run, release or wait
	JobID      int64  `json:"job_id,omitempty"`
	Job        string `json:"job,omitempty"`
	RunnerName string `json:"runner_name,omitempty"`
	JITConfig  string `json:"jit_config,omitempty"`
}

// SignalRequest is one signal about the caller's own instance.
type SignalRequest struct {
	Kind   string `json:"kind"`
	Job    string `json:"job,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ErrorResponse is the body of every answer that is not a success.
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error codes, so agents branch on the code rather than on the prose.
const (
	CodeBadRequest    = "bad_request"    // 400: fix the request, do not retry it
	CodeTooLarge      = "too_large"      // 413
	CodeUnauthorized  = "unauthorized"   // 401: unknown token or wrong bootstrap credentials
	CodeInstanceEnded = "instance_ended" // 401: the token expired with its instance
	CodeTokenIssued   = "token_issued"   // 409 on hello: the instance already has its token
	CodeRejected      = "rejected"       // 409 on signal: refused for good, changed nothing
	CodeUnavailable   = "unavailable"    // 503: try again after Retry-After
	CodeNotFound      = "not_found"      // 404 or 405
)
