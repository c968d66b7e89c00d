package sqs_test

import (
	"context"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
)

// onClock is a queue under a prefix whose time in the emulator follows a
// virtual clock: the contract suite moves it through setTime.
type onClock struct {
	*sqs.Queue
	emu *mototest.SQSTime
}

// openOnClock returns queues under a fresh prefix, created as bootstrap
// would, whose emulated SQS time starts at clk's.
func openOnClock(t *testing.T, clk *clock.Virtual, names ...string) domain.Queue {
	t.Helper()
	p := prefix(t)
	emu := mototest.NewSQSTime(t, p, clk.Now())
	api := parking{Client: awssqs.NewFromConfig(mototest.Config(t)), clk: clk, emu: emu}
	q := sqs.New(api, p, sqs.Options{})
	if _, _, err := q.Ensure(t.Context(), names); err != nil {
		t.Fatalf("ensure %v: %v", names, err)
	}
	return onClock{q, emu}
}

// setTime sets the emulated SQS time of a queue openOnClock returned.
func setTime(t *testing.T, q domain.Queue, now time.Time) {
	t.Helper()
	if err := q.(onClock).emu.Set(t.Context(), now); err != nil {
		t.Fatal(err)
	}
}

// parking is the SQS client of a queue on a virtual clock. A long poll
// the emulator has parked holds a timer on the clock until it returns, as
// a long poll of a queue that takes its time from the clock waits on one:
// that is how the suite knows a poll waits before it moves the clock.
type parking struct {
	*awssqs.Client
	clk *clock.Virtual
	emu *mototest.SQSTime
}

func (p parking) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	if in.WaitTimeSeconds == 0 {
		return p.Client.ReceiveMessage(ctx, in, opts...)
	}
	wait := time.Duration(in.WaitTimeSeconds) * time.Second
	poll := p.emu.NewPoll()
	watching, stop := context.WithCancel(ctx)
	timer := make(chan domain.Timer, 1)
	go func() {
		defer close(timer)
		// An error leaves the poll without its timer: the suite then
		// fails, saying the poll never waited.
		if parked, _ := poll.Parked(watching); parked {
			timer <- p.clk.AfterFunc(wait, func() {})
		}
	}()
	out, err := p.Client.ReceiveMessage(ctx, in, append(opts, poll.Option)...)
	stop()
	if t, ok := <-timer; ok {
		t.Stop()
	}
	return out, err
}
