package dynamodb

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// ErrNoTable: the table does not exist. Throttling and refused
// credentials or permissions are awsconf's ErrThrottled, ErrCredentials
// and ErrDenied.
var ErrNoTable = errors.New("table not found (create it with `bullpen aws bootstrap`)")

// describe names the operation and table of a failed call and, for the
// failures an operator can act on, says what to do. Credentials never
// appear: the SDK's messages do not carry them.
func describe(op, table string, err error) error {
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ResourceNotFoundException" {
		return fmt.Errorf("dynamodb %s on %s: %w", op, table, ErrNoTable)
	}
	if isThrottledCancel(err) {
		// The message names the reasons, nothing of the request.
		return fmt.Errorf("dynamodb %s on %s: %w: %w", op, table, awsconf.ErrThrottled, err)
	}
	if kind := awsconf.Kind(err); kind != nil {
		return fmt.Errorf("dynamodb %s on %s: %w: %s: %s", op, table, kind, api.ErrorCode(), awsconf.Shown(api))
	}
	return fmt.Errorf("dynamodb %s on %s: %w", op, table, err)
}

// isConditionFailed reports whether a single write was refused by its
// condition: another writer changed the row since it was read.
func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// conflictItem is the row as a refused conditional write found it (the
// write asked for it), nil when there was none.
func conflictItem(err error) map[string]types.AttributeValue {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item
	}
	return nil
}

// writeMark returns a mark no other write carries.
func writeMark() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// refusedBy reports whether a refused conditional write found the row
// carrying mark: its own earlier attempt landed although its answer was
// lost, and the SDK's retry was refused by it.
func refusedBy(err error, mark string) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf) && ccf.Item != nil && getS(ccf.Item, attrMark) == mark
}

// cancelled returns the per-item reasons of a cancelled transaction, or
// nil when err is something else.
func cancelled(err error) []types.CancellationReason {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		if tc.CancellationReasons == nil {
			return []types.CancellationReason{}
		}
		return tc.CancellationReasons
	}
	return nil
}

// retryable reports whether a cancelled transaction may succeed when
// decided again: a condition on a row that moved, or another transaction
// on the same rows.
func retryable(reasons []types.CancellationReason) bool {
	for _, r := range reasons {
		if r.Code == nil {
			continue
		}
		switch *r.Code {
		case "None", "ConditionalCheckFailed", "TransactionConflict":
		default:
			return false
		}
	}
	return true
}

// throttledOnly reports whether a transaction was cancelled for
// throughput and nothing else that sending it again would not cure: no
// condition of it failed.
func throttledOnly(reasons []types.CancellationReason) bool {
	throttled := false
	for _, r := range reasons {
		switch aws.ToString(r.Code) {
		case "ThrottlingError", "ProvisionedThroughputExceeded":
			throttled = true
		case "", "None", "TransactionConflict":
		default:
			return false
		}
	}
	return throttled
}

// isThrottledCancel reports whether err is a transaction cancelled for
// throughput alone.
func isThrottledCancel(err error) bool {
	reasons := cancelled(err)
	return reasons != nil && throttledOnly(reasons)
}
