// Package ec2like holds the EC2 semantics that bullpen's own providers
// (internal/cloud/sim and internal/cloud/local, and internal/cloud/ec2 its operation names) share, so that they cannot
// drift apart from each other: operation names and error codes, which
// state changes a batch call makes or refuses, all-or-nothing validation of
// the ids a call names, ClientToken idempotency of CreateFleet, call
// counting, tag filtering and how long terminated machines stay listed.
//
// It knows nothing of timing or processes: the providers keep their
// machines, their lock and their own way of moving a machine between
// states, and call these helpers under their lock. Nothing here is safe
// for concurrent use on its own.
package ec2like

import (
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// EC2 operation names: the Op of every domain.CloudError and the keys of
// Calls.
const (
	OpCreateFleet        = "CreateFleet"
	OpStartInstances     = "StartInstances"
	OpStopInstances      = "StopInstances"
	OpTerminateInstances = "TerminateInstances"
	OpCreateTags         = "CreateTags"
	OpDescribeInstances  = "DescribeInstances"
	OpDescribeImages     = "DescribeImages"
)

// EC2 error codes: the Code of a domain.CloudError.
const (
	CodeIncorrectState     = "IncorrectInstanceState"
	CodeNotFound           = "InvalidInstanceID.NotFound"
	CodeAMINotFound        = "InvalidAMIID.NotFound"
	CodeAMIMalformed       = "InvalidAMIID.Malformed"
	CodeInsufficient       = "InsufficientInstanceCapacity"
	CodeThrottled          = "RequestLimitExceeded"
	CodeInvalidParameter   = "InvalidParameterValue"
	CodeMissingParameter   = "MissingParameter"
	CodeIdempotentMismatch = "IdempotentParameterMismatch"
	CodeInternal           = "InternalError"
)

// Limits as EC2 sets them.
const (
	// MaxPerCall is the most ids one batch call, or machines one
	// CreateFleet, may carry.
	MaxPerCall = 1000
	// DefaultTerminatedRetention is how long a terminated machine is still
	// described by id: about an hour on EC2.
	DefaultTerminatedRetention = time.Hour
)

// Errorf builds the error of a refused call: the EC2 code, the sentinel
// callers branch on (errors.Is), and a message saying what was wrong.
func Errorf(op, code string, sentinel error, format string, args ...any) *domain.CloudError {
	return &domain.CloudError{Op: op, Code: code, Err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)}
}
