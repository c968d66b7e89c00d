package mototest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// SQSTime is the time of the emulator's SQS queues under one name prefix,
// set by a test on a virtual clock: send times, delays, visibility
// timeouts, long polls and the deduplication window all read it, and it
// moves only when the test sets it. Queues under other prefixes keep real
// time, so tests in real time share the emulator with it.
type SQSTime struct {
	endpoint string
	prefix   string
}

// NewSQSTime sets the time of the queues under prefix to now, and gives
// them real time again when t ends. Where the emulator cannot set its
// time (moto_server as installed, without serve.py), the test is skipped,
// or fails under CI=true.
func NewSQSTime(t testing.TB, prefix string, now time.Time) *SQSTime {
	t.Helper()
	st := &SQSTime{endpoint: Endpoint(t), prefix: prefix}
	if !server.patched {
		if os.Getenv("CI") == "true" {
			t.Fatal("moto_server as installed cannot set its SQS time: moto must be importable by python3")
		}
		t.Skip("skipped: moto_server as installed cannot set its SQS time (moto must be importable by python3)")
	}
	if err := st.Set(t.Context(), now); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Long polls still parked under prefix end now.
		_ = st.call(context.Background(), http.MethodDelete, "/_bullpen/sqs-time", url.Values{"prefix": {prefix}}, nil)
	})
	return st
}

// Set sets the time of the queues to now, to the millisecond. A long poll
// of one of them that waits notices it at once.
func (st *SQSTime) Set(ctx context.Context, now time.Time) error {
	q := url.Values{"prefix": {st.prefix}, "ms": {fmt.Sprint(now.UnixMilli())}}
	return st.call(ctx, http.MethodPut, "/_bullpen/sqs-time", q, nil)
}

// Poll is a long poll the test follows: pass Option to its ReceiveMessage
// call, and Parked tells when the emulator has parked it.
type Poll struct {
	st *SQSTime
	id string
}

// NewPoll names a long poll about to be made.
func (st *SQSTime) NewPoll() Poll {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return Poll{st, hex.EncodeToString(b)}
}

// Option marks the ReceiveMessage call as the poll.
func (p Poll) Option(o *awssqs.Options) {
	o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("X-Bullpen-Poll", p.id))
}

// Parked waits until the emulator has parked the poll (true) or answered
// it without waiting (false); ctx ends the wait early.
func (p Poll) Parked(ctx context.Context) (bool, error) {
	var state string
	err := p.st.call(ctx, http.MethodGet, "/_bullpen/sqs-poll", url.Values{"id": {p.id}}, &state)
	return state == "parked", err
}

func (st *SQSTime) call(ctx context.Context, method, path string, q url.Values, answer *string) error {
	req, err := http.NewRequestWithContext(ctx, method, st.endpoint+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("emulator's SQS time: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("emulator's SQS time: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("emulator's SQS time: %s %s: %s", method, path, resp.Status)
	}
	if answer != nil {
		*answer = string(body)
	}
	return nil
}
