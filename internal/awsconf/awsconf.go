// Package awsconf loads the AWS configuration every bullpen backend on AWS
// shares: credentials from the SDK's default chain only (environment,
// shared files, instance role; never flags), the region, an endpoint for
// emulators, and the SDK's own retryer for throttling.
package awsconf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/middleware"
)

// Options select the region and, for emulators, the endpoint.
type Options struct {
	Region string
	// Endpoint, when set, is where every AWS call goes (moto, LocalStack).
	Endpoint string
	// MaxAttempts bounds the SDK's attempts of a throttled or failed call;
	// default 5. The SDK retries every call whose failure it deems
	// retryable, mutating ones too, so a call whose answer was lost may
	// take effect twice. Where that matters the call guards itself: EC2
	// fleet requests and DynamoDB transactions carry a client token the
	// retry resends, and the store's conditional writes recognise their
	// own first attempt. An SQS message sent again reaches its queue
	// twice: the FIFO inbox drops the copy by its deduplication id, and
	// the other queues' consumers are idempotent, as SQS's at-least-once
	// delivery requires of them anyway.
	MaxAttempts int
	// MaxBackoff caps the SDK's wait between attempts; default 20 s.
	MaxBackoff time.Duration
	// OnCall, when set, is told of every call the clients make (each
	// attempt of a retried one), by service and operation (what DynamoDB
	// and SQS bill by), and how long the attempt took to its answer.
	OnCall func(service, operation string, took time.Duration)
}

// Load returns the configuration the backends build their clients from.
func Load(ctx context.Context, o Options) (aws.Config, error) {
	if o.Region == "" {
		return aws.Config{}, errors.New("aws: no region (--aws-region, or AWS_REGION)")
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 20 * time.Second
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(o.Region),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(s *retry.StandardOptions) {
				s.MaxAttempts, s.MaxBackoff = o.MaxAttempts, o.MaxBackoff
			})
		}))
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws: load configuration: %w", err)
	}
	// Credentials are looked up now, once, so that a missing or broken
	// chain is named at start rather than by the first call of each loop.
	if cfg.Credentials == nil {
		return aws.Config{}, fmt.Errorf("aws: no usable credentials: %w", ErrCredentials)
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return aws.Config{}, fmt.Errorf("aws: no usable credentials: %w: %v", ErrCredentials, err)
	}
	cfg.HTTPClient = HTTPClient(cfg.HTTPClient)
	if o.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(o.Endpoint)
	}
	if o.OnCall != nil {
		cfg.APIOptions = append(cfg.APIOptions, countCalls(o.OnCall))
	}
	return cfg, nil
}

// countCalls reports each attempt of each call and how long it took: it
// sits in the finalize step, which the retryer runs once per attempt.
func countCalls(onCall func(service, operation string, took time.Duration)) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("bullpenCountCalls",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				began := time.Now()
				out, md, err := next.HandleFinalize(ctx, in)
				onCall(awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx), time.Since(began))
				return out, md, err
			}), middleware.After)
	}
}
