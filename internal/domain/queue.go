package domain

import (
	"context"
	"errors"
	"time"
)

// Queue names bullpen uses. Resource-pool queues are per runner class:
// ResourcePoolQueue(class).
const (
	QueueInbox  = "inbox"  // accepted webhook deliveries, not yet processed
	QueuePool   = "pool"   // jobs for a pool's warm instances
	QueueLaunch = "launch" // jobs to serve by reuse or creation
)

// ResourcePoolQueue names the resource-pool queue of one runner class.
func ResourcePoolQueue(class string) string { return "rp/" + class }

// Message is one received message. Receipt identifies this receipt: it
// deletes the message or changes its visibility until the message is
// received again.
type Message struct {
	ID       string
	Body     []byte
	Receipt  string
	Receives int // times received, this one included
	SentAt   time.Time
}

// SendRequest is one message to send.
type SendRequest struct {
	Body []byte
	// Delay keeps the message invisible for this long after sending.
	Delay time.Duration
	// DedupID, when set, drops the message if another with the same id was
	// sent to the same queue within the queue's deduplication window.
	DedupID string
}

// QueueStats counts a queue's messages.
type QueueStats struct {
	Visible  int // ready to receive
	InFlight int // received, not deleted, visibility not expired
	Delayed  int // sent with a delay not yet over
}

// Queue is a set of named message queues with SQS's semantics: at-least-once
// delivery, visibility timeouts, delays and deduplication ids. Messages
// become visible in the order they were sent (ties by send order), but a
// consumer must not rely on strict ordering. Every implementation runs the
// contract suite in internal/queue/queuetest.
type Queue interface {
	// Send enqueues messages, all or none.
	Send(ctx context.Context, queue string, msgs []SendRequest) error
	// Receive returns up to max visible messages, making them invisible for
	// visibility. With none visible it waits up to wait for one to become
	// visible (a long poll), then returns what it has, possibly nothing.
	Receive(ctx context.Context, queue string, max int, visibility, wait time.Duration) ([]Message, error)
	// Delete removes received messages. A receipt that is no longer current
	// (the message was deleted, or received again after its visibility
	// expired) is ignored.
	Delete(ctx context.Context, queue string, receipts []string) error
	// ChangeVisibility makes a received message visible again after d (0:
	// now). ErrStaleReceipt when the receipt is no longer current, or the
	// message is no longer in flight (its visibility ran out).
	ChangeVisibility(ctx context.Context, queue, receipt string, d time.Duration) error
	Stats(ctx context.Context, queue string) (QueueStats, error)
}

// SQS's limits, which every implementation enforces alike.
const (
	MaxQueueDelay = 15 * time.Minute
	MaxVisibility = 12 * time.Hour
	// MaxMessageBody is the largest message body, and SQS's limit on the
	// body bytes of one batch, for a queue created with defaults.
	MaxMessageBody = 256 << 10
)

// ErrStaleReceipt: the receipt no longer identifies a received message.
var ErrStaleReceipt = errors.New("stale receipt")

// ResourcePoolEntry is the message that stands for one idle reusable
// instance in its class's resource-pool queue (the provisioning design's format, plus the
// cloud id; InstanceID is bullpen's id, the key for store look-ups).
type ResourcePoolEntry struct {
	InstanceID    string    `json:"instanceId"`
	CloudID       string    `json:"cloudId"`
	UsageClass    string    `json:"usageClass"`
	InstanceType  string    `json:"instanceType"`
	CPU           int       `json:"cpu"`
	Mem           int       `json:"mem"` // MiB
	ResourceClass string    `json:"resourceClass"`
	Threshold     time.Time `json:"threshold"` // the entry expires then
}

// ResourceClassFor is the coarse size label of a machine with cpu vCPUs.
func ResourceClassFor(cpu int) string {
	switch {
	case cpu <= 2:
		return "small"
	case cpu <= 8:
		return "medium"
	}
	return "large"
}
