package awsconf_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

const throttled = `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r</RequestID></Response>`

const described = `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId><reservationSet/></DescribeInstancesResponse>`

// ec2Answering serves the first throttle answers as EC2's throttling
// error, then success, and counts the requests.
func ec2Answering(t *testing.T, throttles int32) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= throttles {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, throttled)
			return
		}
		fmt.Fprint(w, described)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func client(t *testing.T, endpoint string, attempts int) *awsec2.Client {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	cfg, err := awsconf.Load(t.Context(), awsconf.Options{Region: "eu-west-1", Endpoint: endpoint, MaxAttempts: attempts, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return awsec2.NewFromConfig(cfg)
}

// Throttling is retried by the SDK's retryer, within its attempts.
func TestThrottledCallsAreRetriedBySDK(t *testing.T) {
	srv, n := ec2Answering(t, 2)
	if _, err := client(t, srv.URL, 3).DescribeInstances(t.Context(), &awsec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("after two throttles: %v", err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d requests, want 3", got)
	}
}

// The attempts are bounded: a call throttled for good fails with EC2's
// code after MaxAttempts requests.
func TestRetriesAreBounded(t *testing.T) {
	srv, n := ec2Answering(t, 100)
	_, err := client(t, srv.URL, 4).DescribeInstances(t.Context(), &awsec2.DescribeInstancesInput{})
	if err == nil {
		t.Fatal("a call throttled for good succeeded")
	}
	if got := n.Load(); got != 4 {
		t.Fatalf("%d requests, want 4", got)
	}
}

func TestLoadNeedsARegion(t *testing.T) {
	if _, err := awsconf.Load(t.Context(), awsconf.Options{}); err == nil {
		t.Fatal("no region accepted")
	}
}

// Without credentials Load fails at once and says where it looked, rather
// than each client's first call failing later.
func TestLoadNamesMissingCredentials(t *testing.T) {
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": home + "/config", "AWS_SHARED_CREDENTIALS_FILE": home + "/credentials",
	} {
		t.Setenv(k, v)
	}
	_, err := awsconf.Load(t.Context(), awsconf.Options{Region: "eu-west-1"})
	if !errors.Is(err, awsconf.ErrCredentials) || !strings.Contains(err.Error(), "no usable credentials") {
		t.Fatalf("load without credentials: %v, want ErrCredentials", err)
	}
}

// Kind sorts the codes DynamoDB, SQS and EC2 answer with by what an
// operator does about them.
func TestKind(t *testing.T) {
	for code, want := range map[string]error{
		"ProvisionedThroughputExceededException": awsconf.ErrThrottled,
		"RequestThrottled":                       awsconf.ErrThrottled,
		"ThrottlingException":                    awsconf.ErrThrottled,
		"UnrecognizedClientException":            awsconf.ErrCredentials,
		"InvalidClientTokenId":                   awsconf.ErrCredentials,
		"ExpiredTokenException":                  awsconf.ErrCredentials,
		"AccessDeniedException":                  awsconf.ErrDenied,
		"AccessDenied":                           awsconf.ErrDenied,
		"ConditionalCheckFailedException":        nil,
		"ResourceNotFoundException":              nil,
	} {
		err := fmt.Errorf("wrapped: %w", &smithy.GenericAPIError{Code: code, Message: "m"})
		if got := awsconf.Kind(err); got != want {
			t.Errorf("%s: %v, want %v", code, got, want)
		}
	}
	if awsconf.Kind(errors.New("connection refused")) != nil {
		t.Error("a network error has a kind")
	}
}

// OnCall hears of every attempt, with the time to its answer: a slow
// service shows in bullpen_aws_call_seconds before anything times out.
func TestOnCallTimesEveryAttempt(t *testing.T) {
	const latency = 20 * time.Millisecond
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(latency) // the service's own time to answer
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, throttled)
			return
		}
		fmt.Fprint(w, described)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	type call struct {
		service, operation string
		took               time.Duration
	}
	var calls []call
	cfg, err := awsconf.Load(t.Context(), awsconf.Options{Region: "eu-west-1", Endpoint: srv.URL, MaxAttempts: 2, MaxBackoff: time.Millisecond,
		OnCall: func(service, operation string, took time.Duration) {
			calls = append(calls, call{service, operation, took})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := awsec2.NewFromConfig(cfg).DescribeInstances(t.Context(), &awsec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("heard of %d attempts, want 2 (a throttled one and its retry): %+v", len(calls), calls)
	}
	for _, c := range calls {
		if c.service != "EC2" || c.operation != "DescribeInstances" || c.took < latency {
			t.Fatalf("heard %+v, want EC2 DescribeInstances taking at least %s", c, latency)
		}
	}
}

func TestShownHidesOnlyACredentialRefusalsMessage(t *testing.T) {
	hidden := awsconf.Shown(&smithy.GenericAPIError{Code: "SignatureDoesNotMatch", Message: "x-amz-security-token:SESSIONSECRET"})
	if strings.Contains(hidden, "SESSIONSECRET") {
		t.Errorf("a credential refusal's message shown: %q", hidden)
	}
	if got := awsconf.Shown(&smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}); got != "Rate exceeded" {
		t.Errorf("a throttling's message: %q", got)
	}
}
