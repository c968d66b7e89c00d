package sqs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Send sends msgs in batches of ten. SQS batches are not atomic, so every
// message is checked first: a request SQS would refuse sends nothing. A
// batch SQS fails in part stops the send; the batches before it stay sent,
// and a caller's retry resends them (deduplicated on a FIFO queue, a
// second delivery to idempotent consumers on a standard one).
func (q *Queue) Send(ctx context.Context, queue string, msgs []domain.SendRequest) error {
	if len(msgs) == 0 {
		return nil
	}
	sqsName, err := q.SQSName(queue)
	if err != nil {
		return err
	}
	fifo := q.fifoQueue(queue)
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for k, m := range msgs {
		if err := validate(m, fifo); err != nil {
			return fmt.Errorf("sqs send to %s: message %d of %d: %w", sqsName, k, len(msgs), err)
		}
		entries[k] = entry(m, fifo)
	}
	u, err := q.url(ctx, "SendMessageBatch", queue)
	if err != nil {
		return err
	}
	sent := 0
	for _, b := range batches(msgs) {
		chunk := entries[b.from:b.to]
		for k := range chunk {
			chunk[k].Id = aws.String(strconv.Itoa(b.from + k))
		}
		out, err := q.api.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: chunk})
		if err != nil {
			return q.wrap("SendMessageBatch", queue, fmt.Errorf("sent %d of %d messages: %w", sent, len(msgs), err))
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("sqs SendMessageBatch %s: sent %d of %d messages; %s",
				sqsName, sent+len(out.Successful), len(msgs), failures("message", out.Failed))
		}
		sent += len(chunk)
	}
	return nil
}

// validate refuses what SQS would refuse, so that no batch is sent when
// one would fail. Errors never quote bodies: they may hold anything.
func validate(m domain.SendRequest, fifo bool) error {
	switch {
	case m.Delay < 0:
		return fmt.Errorf("negative delay %v", m.Delay)
	case m.Delay > domain.MaxQueueDelay:
		return fmt.Errorf("delay %v is over SQS's %v", m.Delay, domain.MaxQueueDelay)
	case m.Delay > 0 && fifo:
		return fmt.Errorf("delay %v on a FIFO queue, which takes no per-message delay", m.Delay)
	case len(m.Body) == 0:
		return fmt.Errorf("empty body")
	case len(m.Body) > MaxBody:
		return fmt.Errorf("body of %d bytes is over SQS's %d", len(m.Body), MaxBody)
	}
	if off, ok := bodyAllowed(m.Body); !ok {
		return fmt.Errorf("body holds a character SQS refuses at byte %d", off)
	}
	return nil
}

// bodyAllowed reports whether SQS accepts b as a message body: UTF-8 of
// the characters XML allows. It returns the offset of the first refused
// character.
func bodyAllowed(b []byte) (int, bool) {
	for off := 0; off < len(b); {
		r, n := utf8.DecodeRune(b[off:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return off, false
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return off, false
		}
		off += n
	}
	return 0, true
}

// entry is the batch entry of m, without its id.
func entry(m domain.SendRequest, fifo bool) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(m.Body))}
	if !fifo {
		e.DelaySeconds = int32(ceilSeconds(m.Delay))
		return e
	}
	id := dedupToken(m.DedupID)
	e.MessageDeduplicationId = aws.String(id)
	e.MessageGroupId = aws.String(group(id))
	return e
}

// ceilSeconds rounds d up to whole seconds: SQS counts in seconds, and a
// message must not show before its delay or come back before its
// visibility is over.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// dedupToken is the MessageDeduplicationId for a dedup id: the id itself
// when SQS takes it (at most 128 printable ASCII characters), a hash of it
// otherwise, and a random id for none, so a message without one is never
// dropped as a copy of another.
func dedupToken(id string) string {
	if id == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return "r-" + hex.EncodeToString(b)
	}
	if len(id) <= 128 && strings.IndexFunc(id, func(r rune) bool { return r < '!' || r > '~' }) < 0 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:])
}

// group spreads messages over Groups message groups by their
// deduplication id: the same id always lands in the same group.
func group(dedup string) string {
	h := fnv.New32a()
	h.Write([]byte(dedup))
	return "g" + strconv.Itoa(int(h.Sum32()%Groups))
}

type span struct{ from, to int }

// batches splits msgs into runs SQS takes in one SendMessageBatch: at most
// ten messages and MaxBody bytes of bodies.
func batches(msgs []domain.SendRequest) []span {
	var out []span
	from, size := 0, 0
	for k, m := range msgs {
		if k > from && (k-from == batchMax || size+len(m.Body) > MaxBody) {
			out = append(out, span{from, k})
			from, size = k, 0
		}
		size += len(m.Body)
	}
	return append(out, span{from, len(msgs)})
}

// failures describes a batch's failed entries by their index in the call,
// as what (message, receipt) number so-and-so.
func failures(what string, failed []types.BatchResultErrorEntry) string {
	var b strings.Builder
	for k, f := range failed {
		if k > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s failed: %s: %s", what, aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return b.String()
}
