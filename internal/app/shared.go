package app

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/promreg"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// Shared keeps the state where several replicas share it: the store in a
// DynamoDB table, the queues in SQS under a name prefix.
type Shared struct {
	Table       string
	QueuePrefix string
	Region      string
	Endpoint    string // an emulator's URL (moto); "" for AWS itself
	// HeartbeatResolution: see dynamodb.Options; default 30 s, well
	// within the reaper's silence allowance. The provisioner's check of a
	// reused instance's heartbeat allows for it.
	HeartbeatResolution time.Duration
}

// DefaultHeartbeatResolution is Shared.HeartbeatResolution's default.
const DefaultHeartbeatResolution = 30 * time.Second

// FixedQueues are the queues every bullpen uses whatever its
// configuration; resource-pool queues (one per runner class) come and go
// with it.
var FixedQueues = []string{domain.QueueInbox, domain.QueuePool, domain.QueueLaunch, intake.DeadLetterQueue}

// openShared opens the DynamoDB store and the SQS queues, checking that
// the table and the fixed queues exist, so that a missing one is named
// when bullpen starts rather than at its first job.
func (a *App) openShared(ctx context.Context, sh Shared) error {
	onCall, err := a.awsCalls()
	if err != nil {
		return err
	}
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: sh.Region, Endpoint: sh.Endpoint, OnCall: onCall})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	refused, err := refusedWrites(a.opts.Registry)
	if err != nil {
		return err
	}
	st, err := dynamodb.Open(ctx, awsdynamodb.NewFromConfig(cfg), sh.Table, a.opts.Clock, dynamodb.Options{
		HeartbeatResolution: sh.HeartbeatResolution, Log: a.opts.Log,
		Refused: func(row string, remembered bool) {
			refused.WithLabelValues(row, strconv.FormatBool(remembered)).Inc()
		},
	})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	q := sqs.New(awssqs.NewFromConfig(cfg), sh.QueuePrefix, sqs.Options{})
	if err := q.Check(ctx, FixedQueues); err != nil {
		return fmt.Errorf("open queues: %w", err)
	}
	a.Store, a.Queue = st, q
	a.closers = append(a.closers, st.Close)
	return nil
}

// refusedWrites is bullpen_store_refused_writes_total, its series present
// from the start at zero, so that a dashboard shows none refused rather
// than no data.
func refusedWrites(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	refused := promreg.Counters("bullpen_store_refused_writes_total",
		"DynamoDB conditional writes refused because a row had changed since it was read or remembered (by this replica or another), after which the change is decided again: by row (instance or job for one row's transition, transaction for a job and its instance together) and whether the row decided on was a remembered one.", "row", "remembered")
	if err := promreg.Register(reg, "store", refused); err != nil {
		return nil, err
	}
	for _, row := range dynamodb.RefusedRows {
		refused.WithLabelValues(row, "true")
		refused.WithLabelValues(row, "false")
	}
	return refused, nil
}

// awsCalls counts every AWS call by service and operation, for
// bullpen_aws_calls_total (the figures DynamoDB and SQS bill by), and
// times it, for bullpen_aws_call_seconds: a store or queue slow to answer
// shows there before it shows as agents' timeouts. One pair serves the EC2
// provider and the shared state alike.
func (a *App) awsCalls() (func(service, operation string, took time.Duration), error) {
	a.awsCallsOnce.Do(func() {
		calls := promreg.Counters("bullpen_aws_calls_total",
			"AWS API calls (each attempt of a retried one), by service and operation.", "service", "operation")
		took := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bullpen_aws_call_seconds",
			Help:    "How long each attempt of an AWS API call took to its answer, by service and operation (SQS ReceiveMessage includes its long poll).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25},
		}, []string{"service", "operation"})
		if err := promreg.Register(a.opts.Registry, "AWS call", calls, took); err != nil {
			a.awsCallsErr = err
			return
		}
		a.awsCallsVec, a.awsCallSeconds = calls, took
	})
	if a.awsCallsErr != nil {
		return nil, a.awsCallsErr
	}
	return func(service, operation string, took time.Duration) {
		a.awsCallsVec.WithLabelValues(service, operation).Inc()
		a.awsCallSeconds.WithLabelValues(service, operation).Observe(took.Seconds())
	}, nil
}
