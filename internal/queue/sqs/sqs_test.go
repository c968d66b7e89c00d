package sqs_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/queue/queuetest"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// prefix is a queue-name prefix of the test's own: the emulator is shared
// by the package's tests.
func prefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + "-"
}

// open returns queues under a fresh prefix on the emulator, with names
// created as bootstrap would.
func open(t *testing.T, names ...string) *sqs.Queue {
	t.Helper()
	q := sqs.New(awssqs.NewFromConfig(mototest.Config(t)), prefix(t), sqs.Options{})
	if _, _, err := q.Ensure(t.Context(), names); err != nil {
		t.Fatalf("ensure %v: %v", names, err)
	}
	return q
}

// The whole contract, on the emulator's SQS time set to the suite's
// clock.
func TestQueueContract(t *testing.T) {
	opts := queuetest.Options{
		SetTime:    setTime,
		Name:       "SQS",
		DedupQueue: domain.QueueInbox,
	}
	queuetest.RunWith(t, func(t *testing.T, clk *clock.Virtual) domain.Queue {
		return openOnClock(t, clk, opts.Queues()...)
	}, opts)
}

func TestEnsureIsIdempotent(t *testing.T) {
	p := prefix(t)
	q := sqs.New(awssqs.NewFromConfig(mototest.Config(t)), p, sqs.Options{})
	names := []string{domain.QueueInbox, domain.QueueLaunch, domain.ResourcePoolQueue("small")}
	want := []string{p + "inbox.fifo", p + "launch", p + "rp-small"}
	created, found, err := q.Ensure(t.Context(), names)
	if err != nil || !slices.Equal(created, want) || len(found) != 0 {
		t.Fatalf("first ensure: created %v, found %v, %v; want created %v", created, found, err, want)
	}
	// A second process finds them all.
	q = sqs.New(awssqs.NewFromConfig(mototest.Config(t)), p, sqs.Options{})
	created, found, err = q.Ensure(t.Context(), names)
	if err != nil || len(created) != 0 || !slices.Equal(found, want) {
		t.Fatalf("second ensure: created %v, found %v, %v; want found %v", created, found, err, want)
	}
}

func TestMissingQueueSaysToBootstrap(t *testing.T) {
	q := open(t)
	ctx := t.Context()
	checks := map[string]error{
		"send": q.Send(ctx, domain.QueueLaunch, []domain.SendRequest{{Body: []byte("x")}}),
	}
	_, checks["receive"] = q.Receive(ctx, domain.QueueInbox, 1, time.Minute, 0)
	_, checks["stats"] = q.Stats(ctx, domain.QueuePool)
	for what, err := range checks {
		if !errors.Is(err, sqs.ErrNoQueue) || !strings.Contains(err.Error(), "bullpen aws bootstrap") {
			t.Errorf("%s on a missing queue: got %v, want ErrNoQueue and the bootstrap hint", what, err)
		}
	}
	if err := checks["receive"]; err != nil && !strings.Contains(err.Error(), "inbox.fifo") {
		t.Errorf("receive: %v does not name the SQS queue", err)
	}
}

// SQS failing (down, throttling, refusing the credentials or a
// permission) is an error naming the call, the queue and what to do; a
// message sent while it fails is not half sent, and the same queue works
// once SQS answers again.
func TestFailuresAreNamedAndTheQueueRecovers(t *testing.T) {
	gate := mototest.NewGate(t)
	p := prefix(t)
	if _, _, err := sqs.New(awssqs.NewFromConfig(mototest.Config(t)), p, sqs.Options{}).Ensure(t.Context(), []string{domain.QueueLaunch}); err != nil {
		t.Fatal(err)
	}
	cfg := mototest.Config(t)
	cfg.BaseEndpoint, cfg.RetryMaxAttempts = aws.String(gate.URL), 1
	q := sqs.New(awssqs.NewFromConfig(cfg), p, sqs.Options{})
	ctx := t.Context()
	for i, c := range mototest.Refusals {
		gate.Fail(c.Fault)
		err := q.Send(ctx, domain.QueueLaunch, []domain.SendRequest{{Body: []byte(fmt.Sprint("during ", i))}})
		_, rerr := q.Receive(ctx, domain.QueueLaunch, 10, time.Minute, 0)
		for what, err := range map[string]error{"SendMessageBatch": err, "ReceiveMessage": rerr} {
			if err == nil || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), p+"launch") ||
				!strings.Contains(err.Error(), c.Says) || (c.Kind != nil && !errors.Is(err, c.Kind)) {
				t.Errorf("%s answered %s: %v; want an error naming the call, the queue and %q", what, c.Fault.Code, err, c.Says)
			}
		}
		gate.Pass()
		if err := q.Send(ctx, domain.QueueLaunch, []domain.SendRequest{{Body: []byte(fmt.Sprint("after ", i))}}); err != nil {
			t.Fatalf("send once SQS answers again after %s: %v", c.Fault.Code, err)
		}
		got, err := q.Receive(ctx, domain.QueueLaunch, 10, time.Minute, time.Second)
		if err != nil || len(got) != 1 || string(got[0].Body) != fmt.Sprint("after ", i) {
			t.Fatalf("receive after %s: %d messages, %v; want only the one sent after", c.Fault.Code, len(got), err)
		}
		if err := q.Delete(ctx, domain.QueueLaunch, []string{got[0].Receipt}); err != nil {
			t.Fatal(err)
		}
	}
}

// A resource-pool queue is one per runner class, and classes come with the
// configuration and jobs' labels: its first use creates it.
func TestResourcePoolQueueIsCreatedOnFirstUse(t *testing.T) {
	q := open(t)
	ctx := t.Context()
	rp := domain.ResourcePoolQueue("adhoc-3f9a")
	if err := q.Send(ctx, rp, []domain.SendRequest{{Body: []byte("idle instance"), Delay: time.Second}}); err != nil {
		t.Fatalf("send to a resource-pool queue not created yet: %v", err)
	}
	if st, err := q.Stats(ctx, rp); err != nil || st.Delayed+st.Visible != 1 {
		t.Fatalf("stats of the new resource-pool queue: %+v, %v; want the message", st, err)
	}
	if err := q.Check(ctx, []string{domain.QueueInbox}); !errors.Is(err, sqs.ErrNoQueue) {
		t.Fatalf("check of a missing fixed queue: %v, want ErrNoQueue", err)
	}
}

// Runner classes are named as the configuration allows, dots and colons
// included: each has a resource-pool queue of its own on SQS.
func TestResourcePoolOfAnyRunnerName(t *testing.T) {
	q := open(t)
	ctx := t.Context()
	runners := []string{"ubuntu-22.04", "ubuntu-22-04", "small.x64", "gpu:a10"}
	for _, runner := range runners {
		if err := q.Send(ctx, domain.ResourcePoolQueue(runner), []domain.SendRequest{{Body: []byte(runner)}}); err != nil {
			t.Fatalf("offer to the resource pool of runner %q: %v", runner, err)
		}
	}
	for _, runner := range runners {
		got, err := q.Receive(ctx, domain.ResourcePoolQueue(runner), 10, time.Minute, 0)
		if err != nil || len(got) != 1 || string(got[0].Body) != runner {
			t.Fatalf("resource pool of runner %q: %d messages, %v; want its own one", runner, len(got), err)
		}
	}
}

// A queue made by other tooling that long-polls or delays by default is
// refused when bullpen starts and on a resource pool's first use, naming
// the setting; set to 0, it is used.
func TestQueuesThatWaitOrDelayByDefaultAreRefused(t *testing.T) {
	p := prefix(t)
	api := awssqs.NewFromConfig(mototest.Config(t))
	urls := map[string]string{}
	for name, attr := range map[string]string{"launch": "ReceiveMessageWaitTimeSeconds", "rp-small": "DelaySeconds"} {
		out, err := api.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(p + name), Attributes: map[string]string{attr: "3"}})
		if err != nil {
			t.Fatal(err)
		}
		urls[attr] = aws.ToString(out.QueueUrl)
	}
	q := sqs.New(api, p, sqs.Options{})
	err := q.Check(t.Context(), []string{domain.QueueLaunch})
	if !errors.Is(err, sqs.ErrQueueSetup) || !strings.Contains(err.Error(), p+"launch") || !strings.Contains(err.Error(), "ReceiveMessageWaitTimeSeconds is 3") {
		t.Fatalf("check of a queue that long-polls by default: %v; want ErrQueueSetup naming it and the setting", err)
	}
	_, err = q.Receive(t.Context(), domain.ResourcePoolQueue("small"), 1, time.Minute, 0)
	if !errors.Is(err, sqs.ErrQueueSetup) || !strings.Contains(err.Error(), "DelaySeconds is 3") {
		t.Fatalf("first use of a resource pool that delays by default: %v; want ErrQueueSetup naming the setting", err)
	}
	for attr, u := range urls {
		if _, err := api.SetQueueAttributes(t.Context(), &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(u), Attributes: map[string]string{attr: "0"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Check(t.Context(), []string{domain.QueueLaunch, domain.ResourcePoolQueue("small")}); err != nil {
		t.Fatalf("check once the queues are set to 0: %v", err)
	}
}

// Intake's dead-letter queue keeps what it holds for SQS's longest
// retention, 14 days; the other queues keep SQS's default.
func TestDeadLettersAreKeptFourteenDays(t *testing.T) {
	p := prefix(t)
	api := awssqs.NewFromConfig(mototest.Config(t))
	if _, _, err := sqs.New(api, p, sqs.Options{}).Ensure(t.Context(), []string{intake.DeadLetterQueue, domain.QueueLaunch}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{intake.DeadLetterQueue: "1209600", domain.QueueLaunch: "345600"} {
		u, err := api.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(p + name)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := api.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Attributes["MessageRetentionPeriod"]; got != want {
			t.Errorf("%s keeps messages %s s, want %s", name, got, want)
		}
	}
}

// SQS stamps the send time itself: on queues in real time, beside those
// whose time follows the contract suite's clock, it is the wall clock's.
func TestSendReceiveDeleteInRealTime(t *testing.T) {
	q := open(t, "work")
	ctx := t.Context()
	before := time.Now().Truncate(time.Millisecond)
	if err := q.Send(ctx, "work", []domain.SendRequest{{Body: []byte("a")}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var got []domain.Message
	for tries := 0; len(got) < 2 && tries < 5; tries++ {
		msgs, err := q.Receive(ctx, "work", 2-len(got), 30*time.Second, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
	for _, m := range got {
		if m.ID == "" || m.Receipt == "" || m.Receives != 1 || m.SentAt.Before(before) || m.SentAt.After(after) {
			t.Fatalf("message %q: id %q receipt %q receives %d sent %v; want ids, 1 receive, sent between %v and %v",
				m.Body, m.ID, m.Receipt, m.Receives, m.SentAt, before, after)
		}
	}
	if err := q.Delete(ctx, "work", []string{got[0].Receipt, got[1].Receipt}); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "work"); err != nil || st != (domain.QueueStats{}) {
		t.Fatalf("after delete: %+v, %v", st, err)
	}
}

func TestDelayCountsOnAStandardQueue(t *testing.T) {
	q := open(t, "work")
	ctx := t.Context()
	if err := q.Send(ctx, "work", []domain.SendRequest{{Body: []byte("later"), Delay: 1500 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "work"); err != nil || st != (domain.QueueStats{Delayed: 1}) {
		t.Fatalf("stats: %+v, %v; want one delayed", st, err)
	}
	// A delay rounds up to two seconds: the long poll gets it by then.
	msgs, err := q.Receive(ctx, "work", 1, time.Minute, 5*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("long poll: %v, %v", msgs, err)
	}
}

func TestFIFORefusesDelays(t *testing.T) {
	q := open(t, domain.QueueInbox)
	err := q.Send(t.Context(), domain.QueueInbox, []domain.SendRequest{
		{Body: []byte("fine"), DedupID: "a"},
		{Body: []byte("delayed"), Delay: time.Second},
	})
	if err == nil || !strings.Contains(err.Error(), "inbox.fifo") {
		t.Fatalf("got %v, want an error naming the FIFO queue", err)
	}
	if st, _ := q.Stats(t.Context(), domain.QueueInbox); st != (domain.QueueStats{}) {
		t.Fatalf("a refused send left %+v", st)
	}
}

// Standard queues drop dedup ids: the consumers of those queues are
// idempotent, and SQS could not honour the ids there anyway.
func TestStandardQueueIgnoresDedupIDs(t *testing.T) {
	q := open(t, "work")
	ctx := t.Context()
	msgs := []domain.SendRequest{{Body: []byte("a"), DedupID: "same"}, {Body: []byte("b"), DedupID: "same"}}
	if err := q.Send(ctx, "work", msgs); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "work"); err != nil || st.Visible != 2 {
		t.Fatalf("stats: %+v, %v; want both messages", st, err)
	}
}

// A burst to the FIFO inbox is spread over message groups, so consumers
// are not held to one batch in flight at a time.
func TestFIFOBurstIsNotSerialised(t *testing.T) {
	q := open(t, domain.QueueInbox)
	ctx := t.Context()
	var msgs []domain.SendRequest
	for k := range 40 {
		id := "delivery-" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		msgs = append(msgs, domain.SendRequest{Body: []byte(id), DedupID: id})
	}
	if err := q.Send(ctx, domain.QueueInbox, msgs); err != nil {
		t.Fatal(err)
	}
	first, err := q.Receive(ctx, domain.QueueInbox, 1, time.Hour, 0)
	if err != nil || len(first) != 1 {
		t.Fatalf("first receive: %v, %v", first, err)
	}
	// With the first message's group held, the other groups still deliver.
	second, err := q.Receive(ctx, domain.QueueInbox, 10, time.Hour, 0)
	if err != nil || len(second) == 0 {
		t.Fatalf("second receive, one message in flight: %d messages, %v; want some", len(second), err)
	}
}

func TestChangeVisibilityRefusesStaleReceipts(t *testing.T) {
	q := open(t, "work")
	ctx := t.Context()
	for _, r := range []string{"", "nonsense"} {
		if err := q.ChangeVisibility(ctx, "work", r, time.Minute); !errors.Is(err, domain.ErrStaleReceipt) {
			t.Errorf("change visibility with %q: got %v, want ErrStaleReceipt", r, err)
		}
	}
	if err := q.Delete(ctx, "work", []string{"", "nonsense"}); err != nil {
		t.Errorf("delete with stale receipts: %v", err)
	}
}

// A burst larger than a batch goes out in several SendMessageBatch calls
// and comes back through Receive's loop, with exact counts on the way.
func TestBatchesAndLoops(t *testing.T) {
	const n = 95
	q := open(t, "burst")
	ctx := t.Context()
	msgs := make([]domain.SendRequest, n)
	for k := range msgs {
		msgs[k] = domain.SendRequest{Body: fmt.Appendf(nil, "job-%03d", k)}
	}
	if err := q.Send(ctx, "burst", msgs); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "burst"); err != nil || st != (domain.QueueStats{Visible: n}) {
		t.Fatalf("after send: %+v, %v", st, err)
	}
	got, err := q.Receive(ctx, "burst", n+10, time.Hour, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var receipts []string
	for _, m := range got {
		if seen[string(m.Body)] {
			t.Fatalf("%s received twice", m.Body)
		}
		seen[string(m.Body)] = true
		receipts = append(receipts, m.Receipt)
	}
	if len(got) != n {
		t.Fatalf("one receive of up to %d: got %d, want all %d", n+10, len(got), n)
	}
	if st, err := q.Stats(ctx, "burst"); err != nil || st != (domain.QueueStats{InFlight: n}) {
		t.Fatalf("after receive: %+v, %v", st, err)
	}
	if err := q.Delete(ctx, "burst", receipts); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "burst"); err != nil || st != (domain.QueueStats{}) {
		t.Fatalf("after delete: %+v, %v", st, err)
	}
}
