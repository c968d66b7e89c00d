package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Receive asks SQS for up to ten messages at a time until it has max or a
// call brings nothing. Only the first call long-polls: once messages are
// flowing, waiting for more would hold the ones in hand. Once it holds
// messages, a failing call ends the receive with them and no error: they
// are invisible now, and dropping them would leave them idle for the whole
// visibility timeout.
func (q *Queue) Receive(ctx context.Context, queue string, max int, visibility, wait time.Duration) ([]domain.Message, error) {
	switch {
	case max < 1:
		return nil, fmt.Errorf("sqs receive from %q: max %d, want at least 1", queue, max)
	case visibility < 0 || visibility > domain.MaxVisibility:
		return nil, fmt.Errorf("sqs receive from %q: visibility %v outside 0 to %v", queue, visibility, domain.MaxVisibility)
	case wait < 0:
		return nil, fmt.Errorf("sqs receive from %q: negative wait %v", queue, wait)
	}
	u, err := q.url(ctx, "ReceiveMessage", queue)
	if err != nil {
		return nil, err
	}
	in := &awssqs.ReceiveMessageInput{
		QueueUrl:          aws.String(u),
		VisibilityTimeout: int32(visibilitySeconds(visibility)),
		WaitTimeSeconds:   int32(waitSeconds(wait)),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
		},
	}
	var out []domain.Message
	for len(out) < max {
		if ctx.Err() != nil && len(out) > 0 {
			break
		}
		in.MaxNumberOfMessages = int32(min(batchMax, max-len(out)))
		res, err := q.api.ReceiveMessage(ctx, in)
		if err != nil {
			if len(out) > 0 {
				break
			}
			return nil, q.wrap("ReceiveMessage", queue, err)
		}
		if len(res.Messages) == 0 {
			break
		}
		for _, m := range res.Messages {
			out = append(out, message(m))
		}
		in.WaitTimeSeconds = 0
	}
	return out, nil
}

// visibilitySeconds rounds a visibility timeout up to whole seconds, and
// makes none one second: the SDK leaves a zero timeout out of the request,
// and SQS would apply the queue's default (30 seconds) instead.
func visibilitySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// waitSeconds is the WaitTimeSeconds of a long poll of at most d: the
// nearest whole second, at most SQS's 20. The port lets a receive return
// early, so a shorter poll than asked is within the contract.
func waitSeconds(d time.Duration) int64 {
	return int64(min(d, maxWait).Round(time.Second) / time.Second)
}

func message(m types.Message) domain.Message {
	out := domain.Message{
		ID:       aws.ToString(m.MessageId),
		Body:     []byte(aws.ToString(m.Body)),
		Receipt:  aws.ToString(m.ReceiptHandle),
		Receives: 1, // received now, whatever SQS counted
	}
	if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && n > 0 {
		out.Receives = n
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		out.SentAt = time.UnixMilli(ms).UTC()
	}
	return out
}

// Delete deletes in batches of ten. SQS refuses a receipt it cannot parse
// or whose message is gone; the port ignores stale receipts, so those
// refusals are dropped and only other failures are errors.
func (q *Queue) Delete(ctx context.Context, queue string, receipts []string) error {
	live := make([]string, 0, len(receipts))
	seen := make(map[string]bool, len(receipts))
	for _, r := range receipts {
		if r != "" && !seen[r] {
			seen[r] = true
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return nil
	}
	u, err := q.url(ctx, "DeleteMessageBatch", queue)
	if err != nil {
		return err
	}
	for from := 0; from < len(live); from += batchMax {
		chunk := live[from:min(from+batchMax, len(live))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for k, r := range chunk {
			entries[k] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(from + k)), ReceiptHandle: aws.String(r)}
		}
		out, err := q.api.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(u), Entries: entries})
		if err != nil {
			return q.wrap("DeleteMessageBatch", queue, fmt.Errorf("%d of %d receipts done: %w", from, len(live), err))
		}
		var failed []types.BatchResultErrorEntry
		for _, f := range out.Failed {
			if !staleCode(aws.ToString(f.Code), aws.ToString(f.Message)) {
				failed = append(failed, f)
			}
		}
		if len(failed) > 0 {
			return q.wrap("DeleteMessageBatch", queue, errors.New(failures("receipt", failed)))
		}
	}
	return nil
}

// ChangeVisibility sets a received message's visibility timeout, rounded
// up to whole seconds, counted from now. The SQS errors for a receipt
// that is not current or whose message is no longer in flight are
// domain.ErrStaleReceipt.
func (q *Queue) ChangeVisibility(ctx context.Context, queue, receipt string, d time.Duration) error {
	if d < 0 || d > domain.MaxVisibility {
		return fmt.Errorf("sqs change visibility in %q: %v outside 0 to %v", queue, d, domain.MaxVisibility)
	}
	if receipt == "" {
		return fmt.Errorf("sqs change visibility in %q: empty receipt: %w", queue, domain.ErrStaleReceipt)
	}
	u, err := q.url(ctx, "ChangeMessageVisibility", queue)
	if err != nil {
		return err
	}
	_, err = q.api.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(u),
		ReceiptHandle:     aws.String(receipt),
		VisibilityTimeout: int32(ceilSeconds(d)),
	})
	if err == nil {
		return nil
	}
	if code, msg := errorCode(err); staleCode(code, msg) {
		return q.wrap("ChangeMessageVisibility", queue, fmt.Errorf("%w (%s: %s)", domain.ErrStaleReceipt, code, msg))
	}
	return q.wrap("ChangeMessageVisibility", queue, err)
}

// Stats reads SQS's approximate counts, which settle about a minute after
// the traffic does: good for gauges and sizing, not for exact decisions.
func (q *Queue) Stats(ctx context.Context, queue string) (domain.QueueStats, error) {
	u, err := q.url(ctx, "GetQueueAttributes", queue)
	if err != nil {
		return domain.QueueStats{}, err
	}
	out, err := q.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return domain.QueueStats{}, q.wrap("GetQueueAttributes", queue, err)
	}
	var st domain.QueueStats
	for _, f := range []struct {
		name types.QueueAttributeName
		to   *int
	}{
		{types.QueueAttributeNameApproximateNumberOfMessages, &st.Visible},
		{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, &st.InFlight},
		{types.QueueAttributeNameApproximateNumberOfMessagesDelayed, &st.Delayed},
	} {
		v, ok := out.Attributes[string(f.name)]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return domain.QueueStats{}, q.wrap("GetQueueAttributes", queue, fmt.Errorf("attribute %s: %q is not a count", f.name, v))
		}
		*f.to = n
	}
	return st, nil
}
