package sqs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// fake is an SQS client that records calls and answers from its fields;
// every queue exists.
type fake struct {
	API       // nil: a call the test does not expect panics
	sends     [][]types.SendMessageBatchRequestEntry
	sendOut   func(call int, in *awssqs.SendMessageBatchInput) (*awssqs.SendMessageBatchOutput, error)
	receives  []awssqs.ReceiveMessageInput
	recvOut   func(call int, in *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error)
	deletes   [][]types.DeleteMessageBatchRequestEntry
	delOut    func(in *awssqs.DeleteMessageBatchInput) (*awssqs.DeleteMessageBatchOutput, error)
	visErr    error
	urlErr    error             // every GetQueueUrl's answer when set
	createErr error             // every CreateQueue's answer
	attrs     map[string]string // every queue's attributes
	attrGets  int
}

func (f *fake) GetQueueUrl(_ context.Context, in *awssqs.GetQueueUrlInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	if f.urlErr != nil {
		return nil, f.urlErr
	}
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.example/1/" + aws.ToString(in.QueueName))}, nil
}

func (f *fake) CreateQueue(context.Context, *awssqs.CreateQueueInput, ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error) {
	return nil, f.createErr
}

func (f *fake) GetQueueAttributes(_ context.Context, in *awssqs.GetQueueAttributesInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error) {
	f.attrGets++
	out := &awssqs.GetQueueAttributesOutput{Attributes: map[string]string{}}
	for _, n := range in.AttributeNames {
		if v, ok := f.attrs[string(n)]; ok {
			out.Attributes[string(n)] = v
		}
	}
	return out, nil
}

func (f *fake) SendMessageBatch(_ context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	f.sends = append(f.sends, in.Entries)
	if f.sendOut != nil {
		return f.sendOut(len(f.sends)-1, in)
	}
	return &awssqs.SendMessageBatchOutput{}, nil
}

func (f *fake) ReceiveMessage(_ context.Context, in *awssqs.ReceiveMessageInput, _ ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	f.receives = append(f.receives, *in)
	return f.recvOut(len(f.receives)-1, in)
}

func (f *fake) DeleteMessageBatch(_ context.Context, in *awssqs.DeleteMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	f.deletes = append(f.deletes, in.Entries)
	if f.delOut != nil {
		return f.delOut(in)
	}
	return &awssqs.DeleteMessageBatchOutput{}, nil
}

func (f *fake) ChangeMessageVisibility(context.Context, *awssqs.ChangeMessageVisibilityInput, ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	return &awssqs.ChangeMessageVisibilityOutput{}, f.visErr
}

func apiErr(code, msg string) error {
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: smithy.FaultClient}
}

func TestSQSName(t *testing.T) {
	q := New(nil, "bp-", Options{})
	for name, want := range map[string]string{
		domain.QueueInbox:                  "bp-inbox.fifo",
		domain.QueuePool:                   "bp-pool",
		domain.QueueLaunch:                 "bp-launch",
		domain.ResourcePoolQueue("medium"): "bp-rp-medium",
		"dead-letter":                      "bp-dead-letter",
		"work":                             "bp-work",
	} {
		if got, err := q.SQSName(name); err != nil || got != want {
			t.Errorf("SQSName(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if got, err := q.SQSName(""); err == nil {
		t.Errorf("SQSName(\"\") = %q, want an error", got)
	}
	// The FIFO list replaces the default.
	q = New(nil, "", Options{FIFO: []string{"work"}})
	for name, want := range map[string]string{"work": "work.fifo", domain.QueueInbox: "inbox"} {
		if got, _ := q.SQSName(name); got != want {
			t.Errorf("with FIFO [work]: SQSName(%q) = %q, want %q", name, got, want)
		}
	}
	// 75 characters and ".fifo" are SQS's longest name.
	q = New(nil, strings.Repeat("p", 70), Options{})
	if got, err := q.SQSName(domain.QueueInbox); err != nil || len(got) != 80 {
		t.Errorf("longest FIFO name: %q, %v", got, err)
	}
}

// Every name the configuration takes for a runner class has a queue: one
// SQS accepts, of its own, under the prefix.
func TestSQSNameOfAnyName(t *testing.T) {
	sqsName := regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	q := New(nil, "bp-", Options{FIFO: []string{domain.QueueInbox, "in.box"}})
	names := []string{
		domain.ResourcePoolQueue("ubuntu-22.04"), domain.ResourcePoolQueue("ubuntu-22-04"), domain.ResourcePoolQueue("ubuntu-22_04"),
		domain.ResourcePoolQueue("small.x64"), domain.ResourcePoolQueue("gpu:a10"), domain.ResourcePoolQueue("gpu;a10"),
		domain.ResourcePoolQueue("zürich"), domain.ResourcePoolQueue("zurich"), domain.ResourcePoolQueue("sp ace"),
		domain.ResourcePoolQueue(strings.Repeat("x", 78)), domain.ResourcePoolQueue(strings.Repeat("x", 79)),
		domain.ResourcePoolQueue(strings.Repeat("é", 60)), domain.ResourcePoolQueue(strings.Repeat("è", 60)),
		"in.box", "in-box", strings.Repeat("y", 200),
	}
	seen := map[string]string{}
	for _, name := range names {
		got, err := q.SQSName(name)
		if err != nil {
			t.Errorf("SQSName(%q): %v", name, err)
			continue
		}
		base, fifo := strings.CutSuffix(got, ".fifo")
		if !strings.HasPrefix(got, "bp-") || !sqsName.MatchString(base) || len(got) > 80 || fifo != q.fifoQueue(name) {
			t.Errorf("SQSName(%q) = %q: not an SQS name under the prefix, ending in .fifo for a FIFO queue only", name, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q share the SQS queue %q", other, name, got)
		}
		seen[got] = name
		if again, _ := q.SQSName(name); again != got {
			t.Errorf("SQSName(%q) = %q, then %q", name, got, again)
		}
	}
	// A name SQS takes as it is keeps the queue it has always had.
	for name, want := range map[string]string{
		domain.ResourcePoolQueue("ubuntu-22-04"):          "bp-rp-ubuntu-22-04",
		domain.ResourcePoolQueue(strings.Repeat("x", 74)): "bp-rp-" + strings.Repeat("x", 74),
	} {
		if got, _ := q.SQSName(name); got != want {
			t.Errorf("SQSName(%q) = %q, want %q as before", name, got, want)
		}
	}
	// The prefix is kept whole, as the IAM policy allows only the queues
	// under it, so one SQS refuses or too long for any name is an error.
	for _, prefix := range []string{"bp.", strings.Repeat("p", 70)} {
		if got, err := New(nil, prefix, Options{}).SQSName(domain.ResourcePoolQueue("ubuntu-22.04")); err == nil {
			t.Errorf("prefix %q: SQSName = %q, want an error", prefix, got)
		}
	}
}

func TestRounding(t *testing.T) {
	for _, c := range []struct {
		d                time.Duration
		ceil, vis, waitS int64
	}{
		{0, 0, 1, 0},
		{time.Millisecond, 1, 1, 0},
		{499 * time.Millisecond, 1, 1, 0},
		{500 * time.Millisecond, 1, 1, 1},
		{time.Second, 1, 1, 1},
		{1001 * time.Millisecond, 2, 2, 1},
		{20 * time.Second, 20, 20, 20},
		{time.Hour, 3600, 3600, 20},
	} {
		if got := ceilSeconds(c.d); got != c.ceil {
			t.Errorf("ceilSeconds(%v) = %d, want %d", c.d, got, c.ceil)
		}
		if got := visibilitySeconds(c.d); got != c.vis {
			t.Errorf("visibilitySeconds(%v) = %d, want %d", c.d, got, c.vis)
		}
		if got := waitSeconds(c.d); got != c.waitS {
			t.Errorf("waitSeconds(%v) = %d, want %d", c.d, got, c.waitS)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := []byte(`{"id":"x"}`)
	for _, c := range []struct {
		name string
		m    domain.SendRequest
		fifo bool
	}{
		{"negative delay", domain.SendRequest{Body: ok, Delay: -time.Nanosecond}, false},
		{"delay over 15 minutes", domain.SendRequest{Body: ok, Delay: domain.MaxQueueDelay + time.Nanosecond}, false},
		{"delay on FIFO", domain.SendRequest{Body: ok, Delay: time.Second}, true},
		{"empty body", domain.SendRequest{}, false},
		{"body too large", domain.SendRequest{Body: make([]byte, MaxBody+1)}, false},
		{"invalid UTF-8", domain.SendRequest{Body: []byte{'a', 0xff}}, false},
		{"control character", domain.SendRequest{Body: []byte("a\x00b")}, false},
		{"non-character", domain.SendRequest{Body: []byte("a\uFFFEb")}, false},
	} {
		if err := validate(c.m, c.fifo); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	for _, c := range []struct {
		name string
		m    domain.SendRequest
		fifo bool
	}{
		{"plain", domain.SendRequest{Body: ok}, false},
		{"15 minutes", domain.SendRequest{Body: ok, Delay: domain.MaxQueueDelay}, false},
		{"dedup on FIFO", domain.SendRequest{Body: ok, DedupID: "d"}, true},
		{"tabs, newlines, emoji", domain.SendRequest{Body: []byte("a\tb\r\nc 🐂 \uE000")}, false},
		{"largest body", domain.SendRequest{Body: []byte(strings.Repeat("x", MaxBody))}, false},
	} {
		if err := validate(c.m, c.fifo); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestDedupToken(t *testing.T) {
	if got := dedupToken("72d3162e-cc78-11e3-81ab-4c9367dc0958"); got != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Errorf("a delivery id changed: %q", got)
	}
	long, spaced := dedupToken(strings.Repeat("x", 129)), dedupToken("a b")
	for _, got := range []string{long, spaced} {
		if len(got) > 128 || strings.ContainsAny(got, " ") {
			t.Errorf("token %q is not one SQS takes", got)
		}
	}
	if long == dedupToken(strings.Repeat("x", 130)) || spaced != dedupToken("a b") {
		t.Error("hashed tokens are not one per id")
	}
	if a, b := dedupToken(""), dedupToken(""); a == b || a == "" {
		t.Errorf("tokens for no id: %q and %q, want distinct", a, b)
	}
}

func TestGroupsSpread(t *testing.T) {
	counts := map[string]int{}
	for k := range 1600 {
		counts[group(fmt.Sprintf("delivery-%d", k))]++
	}
	if len(counts) != Groups {
		t.Fatalf("%d groups used, want %d", len(counts), Groups)
	}
	for g, n := range counts {
		if n < 50 || n > 150 {
			t.Errorf("group %s holds %d of 1600", g, n)
		}
	}
	if group("same") != group("same") {
		t.Error("one id, two groups")
	}
}

func TestBatches(t *testing.T) {
	body := func(n int) domain.SendRequest { return domain.SendRequest{Body: make([]byte, n)} }
	many := make([]domain.SendRequest, 25)
	for k := range many {
		many[k] = body(1)
	}
	big := []domain.SendRequest{body(MaxBody / 2), body(MaxBody / 2), body(1), body(MaxBody), body(1)}
	for _, c := range []struct {
		msgs []domain.SendRequest
		want []span
	}{
		{many, []span{{0, 10}, {10, 20}, {20, 25}}},
		{big, []span{{0, 2}, {2, 3}, {3, 4}, {4, 5}}},
		{many[:10], []span{{0, 10}}},
	} {
		if got := batches(c.msgs); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("batches: got %v, want %v", got, c.want)
		}
	}
}

func TestSendEntries(t *testing.T) {
	f := &fake{}
	q := New(f, "", Options{})
	err := q.Send(t.Context(), "work", []domain.SendRequest{
		{Body: []byte("a"), Delay: 1500 * time.Millisecond, DedupID: "ignored"},
		{Body: []byte("b")},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := f.sends[0]
	if e[0].DelaySeconds != 2 || e[0].MessageDeduplicationId != nil || e[0].MessageGroupId != nil || e[1].DelaySeconds != 0 {
		t.Fatalf("standard entries: %+v", e)
	}
	if err := q.Send(t.Context(), domain.QueueInbox, []domain.SendRequest{{Body: []byte("a"), DedupID: "d1"}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	e = f.sends[1]
	if aws.ToString(e[0].MessageDeduplicationId) != "d1" || aws.ToString(e[0].MessageGroupId) != group("d1") ||
		aws.ToString(e[1].MessageDeduplicationId) == "" || e[1].MessageGroupId == nil || e[0].DelaySeconds != 0 {
		t.Fatalf("FIFO entries: %+v", e)
	}
}

// A bad message anywhere sends nothing, even in a later batch.
func TestSendChecksEverythingFirst(t *testing.T) {
	f := &fake{}
	q := New(f, "", Options{})
	msgs := make([]domain.SendRequest, 25)
	for k := range msgs {
		msgs[k] = domain.SendRequest{Body: []byte("secret body")}
	}
	msgs[23].Delay = -time.Second
	err := q.Send(t.Context(), "work", msgs)
	if err == nil || len(f.sends) != 0 {
		t.Fatalf("got %v after %d calls, want an error and no call", err, len(f.sends))
	}
	if !strings.Contains(err.Error(), "message 23") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q should name message 23 and not quote its body", err)
	}
	err = q.Send(t.Context(), domain.QueueInbox, []domain.SendRequest{{Body: []byte("x"), Delay: time.Second}})
	if err == nil || !strings.Contains(err.Error(), "inbox.fifo") || len(f.sends) != 0 {
		t.Fatalf("delay on the FIFO inbox: %v", err)
	}
}

func TestSendReportsPartialFailure(t *testing.T) {
	f := &fake{sendOut: func(call int, in *awssqs.SendMessageBatchInput) (*awssqs.SendMessageBatchOutput, error) {
		if call == 0 {
			return &awssqs.SendMessageBatchOutput{Successful: make([]types.SendMessageBatchResultEntry, len(in.Entries))}, nil
		}
		return &awssqs.SendMessageBatchOutput{
			Successful: make([]types.SendMessageBatchResultEntry, 8),
			Failed: []types.BatchResultErrorEntry{
				{Id: in.Entries[3].Id, Code: aws.String("InternalError"), Message: aws.String("try again")},
				{Id: in.Entries[7].Id, Code: aws.String("InternalError"), Message: aws.String("try again")},
			},
		}, nil
	}}
	q := New(f, "bp-", Options{})
	msgs := make([]domain.SendRequest, 30)
	for k := range msgs {
		msgs[k] = domain.SendRequest{Body: []byte("x")}
	}
	err := q.Send(t.Context(), "work", msgs)
	if err == nil || len(f.sends) != 2 {
		t.Fatalf("got %v after %d calls; want an error after the second batch", err, len(f.sends))
	}
	for _, want := range []string{"bp-work", "sent 18 of 30", "message 13 failed", "message 17 failed", "InternalError"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Throttling and network errors keep their identity through the wrapping,
// so callers' retry loops can tell them apart.
func TestErrorsNameOperationAndQueue(t *testing.T) {
	throttled := apiErr("RequestThrottled", "slow down")
	f := &fake{recvOut: func(int, *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) { return nil, throttled }}
	q := New(f, "bp-", Options{})
	_, err := q.Receive(t.Context(), domain.QueuePool, 5, time.Minute, time.Second)
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "RequestThrottled" ||
		!strings.Contains(err.Error(), "ReceiveMessage") || !strings.Contains(err.Error(), "bp-pool") {
		t.Fatalf("got %v", err)
	}
}

func TestReceiveLoops(t *testing.T) {
	next := 0
	f := &fake{recvOut: func(call int, in *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) {
		n := int(in.MaxNumberOfMessages)
		if call == 2 {
			n = 3 // then SQS has no more
		}
		if call == 3 {
			n = 0
		}
		out := &awssqs.ReceiveMessageOutput{}
		for range n {
			next++
			out.Messages = append(out.Messages, types.Message{
				MessageId:     aws.String(fmt.Sprint(next)),
				ReceiptHandle: aws.String(fmt.Sprint("r", next)),
				Body:          aws.String("b"),
				Attributes:    map[string]string{"ApproximateReceiveCount": "3", "SentTimestamp": "1748856600123"},
			})
		}
		return out, nil
	}}
	q := New(f, "", Options{})
	msgs, err := q.Receive(t.Context(), "work", 25, 90*time.Second+time.Millisecond, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 23 || len(f.receives) != 4 {
		t.Fatalf("%d messages in %d calls, want 23 in 4", len(msgs), len(f.receives))
	}
	for k, want := range []struct{ max, wait int32 }{{10, 20}, {10, 0}, {5, 0}, {2, 0}} {
		in := f.receives[k]
		if in.MaxNumberOfMessages != want.max || in.WaitTimeSeconds != want.wait || in.VisibilityTimeout != 91 {
			t.Errorf("call %d: max %d wait %d visibility %d; want max %d wait %d visibility 91",
				k, in.MaxNumberOfMessages, in.WaitTimeSeconds, in.VisibilityTimeout, want.max, want.wait)
		}
	}
	m := msgs[0]
	if m.ID != "1" || m.Receipt != "r1" || m.Receives != 3 || !m.SentAt.Equal(time.UnixMilli(1748856600123)) {
		t.Fatalf("message %+v", m)
	}
}

// Messages in hand are returned when a later call fails: they are
// invisible already.
func TestReceiveKeepsWhatItHas(t *testing.T) {
	f := &fake{recvOut: func(call int, in *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) {
		if call > 0 {
			return nil, errors.New("connection reset")
		}
		return &awssqs.ReceiveMessageOutput{Messages: []types.Message{{MessageId: aws.String("1"), ReceiptHandle: aws.String("r")}}}, nil
	}}
	msgs, err := New(f, "", Options{}).Receive(t.Context(), "work", 1+batchMax, time.Minute, 0)
	if err != nil || len(msgs) != 1 || msgs[0].Receives != 1 {
		t.Fatalf("got %+v, %v", msgs, err)
	}
}

func TestReceiveRefusesBadArguments(t *testing.T) {
	q := New(&fake{}, "", Options{})
	for name, args := range map[string]struct {
		max       int
		vis, wait time.Duration
	}{
		"no max":              {0, time.Second, 0},
		"negative visibility": {1, -time.Second, 0},
		"long visibility":     {1, domain.MaxVisibility + time.Second, 0},
		"negative wait":       {1, time.Second, -time.Second},
	} {
		if _, err := q.Receive(t.Context(), "work", args.max, args.vis, args.wait); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDeleteIgnoresStaleReceipts(t *testing.T) {
	f := &fake{delOut: func(in *awssqs.DeleteMessageBatchInput) (*awssqs.DeleteMessageBatchOutput, error) {
		return &awssqs.DeleteMessageBatchOutput{Failed: []types.BatchResultErrorEntry{
			{Id: in.Entries[0].Id, Code: aws.String("ReceiptHandleIsInvalid")},
		}}, nil
	}}
	q := New(f, "", Options{})
	receipts := []string{"", "a", "a"}
	for k := range 12 {
		receipts = append(receipts, fmt.Sprint("r", k))
	}
	if err := q.Delete(t.Context(), "work", receipts); err != nil {
		t.Fatal(err)
	}
	if len(f.deletes) != 2 || len(f.deletes[0]) != 10 || len(f.deletes[1]) != 3 {
		t.Fatalf("delete batches %v, want 10 and 3 receipts", f.deletes)
	}
	f.delOut = func(in *awssqs.DeleteMessageBatchInput) (*awssqs.DeleteMessageBatchOutput, error) {
		return &awssqs.DeleteMessageBatchOutput{Failed: []types.BatchResultErrorEntry{
			{Id: in.Entries[0].Id, Code: aws.String("InternalError"), Message: aws.String("oops")},
		}}, nil
	}
	if err := q.Delete(t.Context(), "work", []string{"a"}); err == nil || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("got %v, want the failure", err)
	}
}

func TestChangeVisibilityStaleCodes(t *testing.T) {
	f := &fake{}
	q := New(f, "", Options{})
	for _, err := range []error{
		&types.ReceiptHandleIsInvalid{Message: aws.String("bad")},
		&types.MessageNotInflight{},
		apiErr("AWS.SimpleQueueService.MessageNotInflight", ""),
		apiErr("InvalidParameterValue", "Value r for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."),
	} {
		f.visErr = err
		if got := q.ChangeVisibility(t.Context(), "work", "r", time.Second); !errors.Is(got, domain.ErrStaleReceipt) {
			t.Errorf("%v: got %v, want ErrStaleReceipt", err, got)
		}
	}
	for _, err := range []error{
		apiErr("InvalidParameterValue", "Value 43300 for parameter VisibilityTimeout is invalid."),
		apiErr("RequestThrottled", ""),
	} {
		f.visErr = err
		if got := q.ChangeVisibility(t.Context(), "work", "r", time.Second); got == nil || errors.Is(got, domain.ErrStaleReceipt) {
			t.Errorf("%v: got %v, want a plain error", err, got)
		}
	}
	if err := q.ChangeVisibility(t.Context(), "work", "r", domain.MaxVisibility+time.Second); err == nil || errors.Is(err, domain.ErrStaleReceipt) {
		t.Errorf("over 12 hours: got %v", err)
	}
}

// A refusal of the credentials says so without AWS's message, which may
// quote the signed request, a session token's header among it.
func TestARefusalOfTheCredentialsShowsNoMessage(t *testing.T) {
	refused := apiErr("SignatureDoesNotMatch", "The Canonical String for this request should have been 'x-amz-security-token:SESSIONSECRET'")
	f := &fake{recvOut: func(int, *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) { return nil, refused }}
	_, err := New(f, "bp-", Options{}).Receive(t.Context(), domain.QueuePool, 5, time.Minute, time.Second)
	if !errors.Is(err, awsconf.ErrCredentials) || strings.Contains(err.Error(), "SESSIONSECRET") || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
		t.Fatalf("got %v", err)
	}
}

// The SDK leaves a zero wait or delay out of a request, so SQS would apply
// the queue's own: a queue whose receive wait or delay is not 0 is refused
// before any message is sent or received, naming each setting and the fix,
// and its setup is read once.
func TestAQueueWithItsOwnWaitOrDelayIsRefused(t *testing.T) {
	f := &fake{attrs: map[string]string{"ReceiveMessageWaitTimeSeconds": "3", "DelaySeconds": "5", "VisibilityTimeout": "30"},
		recvOut: func(int, *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) {
			return &awssqs.ReceiveMessageOutput{}, nil
		}}
	q := New(f, "bp-", Options{})
	_, rerr := q.Receive(t.Context(), domain.ResourcePoolQueue("small"), 1, time.Minute, 0)
	serr := q.Send(t.Context(), domain.QueueLaunch, []domain.SendRequest{{Body: []byte("x")}})
	cerr := q.Check(t.Context(), []string{domain.QueuePool})
	for what, err := range map[string]error{"receive": rerr, "send": serr, "check": cerr} {
		if !errors.Is(err, ErrQueueSetup) {
			t.Errorf("%s on a queue that long-polls and delays by default: %v, want ErrQueueSetup", what, err)
			continue
		}
		for _, want := range []string{"ReceiveMessageWaitTimeSeconds is 3", "DelaySeconds is 5", "set-queue-attributes", "ReceiveMessageWaitTimeSeconds=0,DelaySeconds=0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", what, err, want)
			}
		}
	}
	if len(f.receives) != 0 || len(f.sends) != 0 {
		t.Fatalf("%d receives and %d sends on refused queues, want none", len(f.receives), len(f.sends))
	}
	f.attrs = map[string]string{"ReceiveMessageWaitTimeSeconds": "0", "DelaySeconds": "0"}
	gets := f.attrGets
	for range 3 {
		if _, err := q.Receive(t.Context(), domain.ResourcePoolQueue("small"), 1, time.Minute, 0); err != nil {
			t.Fatalf("receive once the queue is set right: %v", err)
		}
	}
	if f.attrGets != gets+1 {
		t.Fatalf("setup read %d times for three receives, want once", f.attrGets-gets)
	}
}

// Creating queues (bullpen aws bootstrap, a resource pool's first use)
// refused for the credentials says so without AWS's message, which may
// quote the signed request, a session token's header among it.
func TestEnsureShowsNoMessageOfARefusalOfTheCredentials(t *testing.T) {
	refused := apiErr("InvalidSignatureException", "The Canonical String for this request should have been 'x-amz-security-token:SESSIONSECRET'")
	f := &fake{urlErr: refused}
	q := New(f, "bp-", Options{})
	_, _, eerr := q.Ensure(t.Context(), []string{domain.QueueInbox})
	// A resource pool's queue is missing, and creating it is refused.
	f.urlErr, f.createErr = &types.QueueDoesNotExist{Message: aws.String("no queue")}, refused
	serr := q.Send(t.Context(), domain.ResourcePoolQueue("small"), []domain.SendRequest{{Body: []byte("x")}})
	for what, err := range map[string]error{"ensure": eerr, "first use": serr} {
		if !errors.Is(err, awsconf.ErrCredentials) || strings.Contains(err.Error(), "SESSIONSECRET") || !strings.Contains(err.Error(), "InvalidSignatureException") {
			t.Errorf("%s: got %v, want ErrCredentials with the code and without AWS's message", what, err)
		}
	}
}
