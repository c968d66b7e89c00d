// Package sqs is domain.Queue on Amazon SQS.
//
// Each bullpen queue is one SQS queue, named by a prefix (so several
// installations share an account) and the bullpen name with "/" turned
// into "-" (SQS allows no slash): "rp/small" under "bullpen-" is
// "bullpen-rp-small". A name SQS cannot take that way (a runner class
// such as "ubuntu-22.04", or one too long) has its other characters
// turned into "-" and a hash of it appended (see SQSName).
//
// The port promises both per-message delays and deduplication ids, and no
// SQS queue type keeps both: standard queues take DelaySeconds per message
// but ignore deduplication ids, FIFO queues deduplicate but refuse
// per-message delays. So each queue takes the type of the promise its
// traffic needs. The inbox is FIFO: GitHub redelivers webhooks, and the
// copies must not reach intake twice. The job and pool queues are
// standard: requeues are delayed, and their consumers are idempotent, as
// they must be anyway since SQS delivers at least once; their dedup ids are
// dropped. Options.FIFO changes the split.
//
// A FIFO queue delivers one message group in order, holding back the rest
// of a group while any of it is in flight. Bullpen never needs that order,
// so messages are spread over a fixed number of groups by their dedup id,
// and a burst of deliveries is consumed in parallel instead of one by one.
//
// The fixed queues are not created on demand: an installation creates
// them once with Ensure (bullpen aws bootstrap), and a missing one is an
// error that says so, rather than a silently created queue with the wrong
// type or permissions. Resource-pool queues are the exception: there is
// one per runner class, and classes come and go with the configuration
// and with jobs' labels, so the first use of one creates it (standard, as
// Ensure would).
//
// The SDK leaves a zero WaitTimeSeconds or DelaySeconds out of a request,
// and SQS then applies the queue's own setting: a receive asked not to
// wait would long-poll, a message sent without a delay would be delayed.
// So a queue bullpen did not create is checked when it is first resolved,
// and one whose receive wait or delivery delay is not 0 is refused with
// the setting to change.
package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// API is the part of the SQS client the queue uses; *awssqs.Client has it.
type API interface {
	GetQueueUrl(context.Context, *awssqs.GetQueueUrlInput, ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
	CreateQueue(context.Context, *awssqs.CreateQueueInput, ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error)
	SendMessageBatch(context.Context, *awssqs.SendMessageBatchInput, ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	ReceiveMessage(context.Context, *awssqs.ReceiveMessageInput, ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *awssqs.DeleteMessageBatchInput, ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(context.Context, *awssqs.ChangeMessageVisibilityInput, ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	GetQueueAttributes(context.Context, *awssqs.GetQueueAttributesInput, ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// Options tune a Queue. The zero value is bullpen's setup.
type Options struct {
	// FIFO lists the bullpen queues that are FIFO queues; nil means just
	// domain.QueueInbox. Sends to them are deduplicated and may not be
	// delayed; sends to the others may be delayed and are not deduplicated.
	FIFO []string
	// DeadLetter lists the bullpen queues that keep what could not be
	// processed; nil means just "inbox-dead", intake's. Ensure creates
	// them with SQS's longest retention, where the others keep its
	// default of four days.
	DeadLetter []string
}

// Queue is domain.Queue on SQS. It is safe for concurrent use.
type Queue struct {
	api        API
	prefix     string
	fifo       []string
	deadLetter []string
	urls       sync.Map // bullpen name → queue URL
}

var _ domain.Queue = (*Queue)(nil)

// New returns the queues named prefix+name in client's account and region.
func New(client API, prefix string, opts Options) *Queue {
	fifo := opts.FIFO
	if fifo == nil {
		fifo = []string{domain.QueueInbox}
	}
	deadLetter := opts.DeadLetter
	if deadLetter == nil {
		deadLetter = []string{"inbox-dead"}
	}
	return &Queue{api: client, prefix: prefix, fifo: slices.Clone(fifo), deadLetter: slices.Clone(deadLetter)}
}

// Limits of SQS that shape requests.
const (
	// batchMax is the most entries one batch call takes, and the most
	// messages one ReceiveMessage returns.
	batchMax = 10
	// MaxBody is the largest message body sent, and the most body bytes in
	// one batch: SQS's limit on both for a queue created with defaults.
	MaxBody = domain.MaxMessageBody
	// maxWait is SQS's longest long poll.
	maxWait = 20 * time.Second
	// maxNameLen bounds an SQS queue name, ".fifo" included.
	maxNameLen = 80
	// maxRetention is SQS's longest MessageRetentionPeriod, 14 days.
	maxRetention = 14 * 24 * time.Hour
	// Groups is how many message groups a FIFO queue's messages are spread
	// over: as many batches of one queue can be in flight at once.
	Groups = 16
)

// ErrNoQueue: the SQS queue a bullpen queue maps to does not exist.
var ErrNoQueue = errors.New("queue does not exist")

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// fifoSuffix ends the name of every FIFO queue, within maxNameLen.
const fifoSuffix = ".fifo"

// nameHashLen is how many hex digits of a name's hash an SQS name that
// had to be changed carries: 40 bits, so that the few classes of one
// installation never share a queue.
const nameHashLen = 10

// fifoQueue reports whether the bullpen queue name is a FIFO queue.
func (q *Queue) fifoQueue(name string) bool { return slices.Contains(q.fifo, name) }

// deadLetterQueue reports whether the bullpen queue name keeps dead
// letters.
func (q *Queue) deadLetterQueue(name string) bool { return slices.Contains(q.deadLetter, name) }

// SQSName is the SQS queue name of the bullpen queue name: the prefix and
// the name with "/" turned into "-", as it has always been wherever SQS
// takes that. Otherwise (a runner class named "ubuntu-22.04", or a name
// too long) every character SQS refuses becomes "-", the name is cut to
// fit, and "-" and a hash of the bullpen name follow, so that two names
// changed alike still get queues of their own. The prefix is kept whole,
// as the IAM policy allows the queues under it only; a prefix SQS refuses,
// or too long to leave room for a hash, is an error.
func (q *Queue) SQSName(name string) (string, error) {
	if name == "" {
		return "", errors.New("sqs: empty queue name")
	}
	if q.prefix != "" && !validName.MatchString(q.prefix) {
		return "", fmt.Errorf("sqs: queue prefix %q may hold only letters, digits, '-' and '_'", q.prefix)
	}
	suffix := ""
	if q.fifoQueue(name) {
		suffix = fifoSuffix
	}
	plain := strings.ReplaceAll(name, "/", "-")
	if validName.MatchString(plain) && len(q.prefix)+len(plain)+len(suffix) <= maxNameLen {
		return q.prefix + plain + suffix, nil
	}
	sum := sha256.Sum256([]byte(name))
	hash := "-" + hex.EncodeToString(sum[:])[:nameHashLen]
	room := maxNameLen - len(q.prefix) - len(hash) - len(suffix)
	if room < 1 {
		return "", fmt.Errorf("sqs: queue %q: prefix %q leaves no room for the queue's name within SQS's %d characters", name, q.prefix, maxNameLen)
	}
	var b strings.Builder
	for _, r := range plain {
		if b.Len() == room {
			break
		}
		if r < utf8.RuneSelf && validName.MatchString(string(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return q.prefix + b.String() + hash + suffix, nil
}

// url resolves a bullpen queue name to its queue URL, once per name,
// checking the queue's setup on the way.
func (q *Queue) url(ctx context.Context, op, name string) (string, error) {
	if u, ok := q.urls.Load(name); ok {
		return u.(string), nil
	}
	sqsName, err := q.SQSName(name)
	if err != nil {
		return "", err
	}
	out, err := q.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqsName)})
	if queueMissing(err) && onDemand(name) {
		if _, _, err := q.Ensure(ctx, []string{name}); err != nil {
			return "", fmt.Errorf("sqs %s: create the queue of %q on first use: %w", op, name, err)
		}
		u, _ := q.urls.Load(name)
		return u.(string), nil
	}
	if err != nil {
		return "", q.wrap(op, name, err)
	}
	u := aws.ToString(out.QueueUrl)
	if err := q.checkSetup(ctx, name, u); err != nil {
		return "", err
	}
	q.urls.Store(name, u)
	return u, nil
}

// onDemand reports whether the queue is created on first use: the
// resource-pool queues, one per runner class.
func onDemand(name string) bool { return strings.HasPrefix(name, domain.ResourcePoolQueue("")) }

// ErrQueueSetup: the SQS queue exists but is set up so that bullpen's
// requests would not do what they ask.
var ErrQueueSetup = errors.New("queue set up in a way bullpen cannot use")

// zeroAttributes are the queue attributes that must be 0, because the SDK
// leaves a zero of theirs out of a request and SQS then applies the
// queue's: with what a request asked for 0 would do instead.
var zeroAttributes = []struct {
	name   types.QueueAttributeName
	effect string
}{
	{types.QueueAttributeNameReceiveMessageWaitTimeSeconds, "a receive asked not to wait waits that long"},
	{types.QueueAttributeNameDelaySeconds, "a message sent without a delay is delayed that long"},
}

// checkSetup refuses a queue whose defaults would override what
// bullpen's requests ask for, naming each setting and how to change it.
func (q *Queue) checkSetup(ctx context.Context, name, u string) error {
	names := make([]types.QueueAttributeName, len(zeroAttributes))
	for k, a := range zeroAttributes {
		names[k] = a.name
	}
	out, err := q.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: names})
	if err != nil {
		return q.wrap("GetQueueAttributes", name, err)
	}
	var problems, fixes []string
	for _, a := range zeroAttributes {
		if v, ok := out.Attributes[string(a.name)]; ok && v != "0" {
			problems = append(problems, fmt.Sprintf("%s is %s s: %s", a.name, v, a.effect))
			fixes = append(fixes, string(a.name)+"=0")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sqsName, _ := q.SQSName(name)
	return fmt.Errorf("sqs queue %s for bullpen queue %q: %w: %s (bullpen sets these on each request, and SQS applies the queue's when the request's is 0: `aws sqs set-queue-attributes --queue-url %s --attributes %s`)",
		sqsName, name, ErrQueueSetup, strings.Join(problems, "; "), u, strings.Join(fixes, ","))
}

// Check resolves the queues of names, failing with every one that is
// missing or set up so that bullpen cannot use it, so that bullpen
// reports them when it starts.
func (q *Queue) Check(ctx context.Context, names []string) error {
	var errs []error
	for _, name := range names {
		if _, err := q.url(ctx, "GetQueueUrl", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ensure creates the SQS queues of names that do not exist yet: FIFO ones
// as FIFO queues deduplicating by explicit id only, the others as plain
// standard queues; dead-letter queues keep their messages for SQS's
// longest retention. It returns the SQS names it created and those it
// found, and fails on a found queue that Check would refuse. Running it
// again changes nothing.
func (q *Queue) Ensure(ctx context.Context, names []string) (created, found []string, err error) {
	for _, name := range names {
		sqsName, err := q.SQSName(name)
		if err != nil {
			return created, found, err
		}
		out, err := q.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqsName)})
		if err == nil {
			found = append(found, sqsName)
			u := aws.ToString(out.QueueUrl)
			if err := q.checkSetup(ctx, name, u); err != nil {
				return created, found, err
			}
			q.urls.Store(name, u)
			continue
		}
		if !queueMissing(err) {
			return created, found, q.wrap("GetQueueUrl", name, err)
		}
		in := &awssqs.CreateQueueInput{QueueName: aws.String(sqsName), Attributes: map[string]string{}}
		if q.fifoQueue(name) {
			in.Attributes[string(types.QueueAttributeNameFifoQueue)] = "true"
			in.Attributes[string(types.QueueAttributeNameContentBasedDeduplication)] = "false"
		}
		if q.deadLetterQueue(name) {
			in.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)] = strconv.Itoa(int(maxRetention / time.Second))
		}
		cout, err := q.api.CreateQueue(ctx, in)
		if err != nil {
			return created, found, q.wrap("CreateQueue", name, err)
		}
		q.urls.Store(name, aws.ToString(cout.QueueUrl))
		created = append(created, sqsName)
	}
	return created, found, nil
}

// wrap names the operation and the queue in err. A missing queue becomes
// ErrNoQueue, and its cached URL is forgotten so that a queue created
// later is found.
func (q *Queue) wrap(op, name string, err error) error {
	sqsName, nerr := q.SQSName(name)
	if nerr != nil {
		sqsName = name
	}
	if queueMissing(err) {
		q.urls.Delete(name)
		return fmt.Errorf("sqs %s: SQS queue %s for bullpen queue %q: %w (run bullpen aws bootstrap to create it)", op, sqsName, name, ErrNoQueue)
	}
	if kind := awsconf.Kind(err); kind == awsconf.ErrCredentials {
		// Not err itself: its text holds AWS's message (see awsconf.Shown).
		code, _ := errorCode(err)
		return fmt.Errorf("sqs %s %s: %w: %s", op, sqsName, kind, code)
	} else if kind != nil {
		return fmt.Errorf("sqs %s %s: %w: %w", op, sqsName, kind, err)
	}
	return fmt.Errorf("sqs %s %s: %w", op, sqsName, err)
}

func errorCode(err error) (code, msg string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", ""
}

func queueMissing(err error) bool {
	var nq *types.QueueDoesNotExist
	if errors.As(err, &nq) {
		return true
	}
	code, _ := errorCode(err)
	return code == "QueueDoesNotExist" || code == "AWS.SimpleQueueService.NonExistentQueue"
}

// staleCode reports whether an SQS error code (with its message) says a
// receipt handle no longer identifies a message in flight.
func staleCode(code, msg string) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight":
		return true
	case "InvalidParameterValue":
		// SQS's answer for a receipt whose message is gone or no longer in
		// flight; other parameters draw the same code.
		return strings.Contains(msg, "ReceiptHandle") || strings.Contains(strings.ToLower(msg), "receipt handle")
	}
	return false
}
