package awsconf_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// answersFirst answers each request as soon as it has read the request's
// body, and keeps the body, as net/http's transport does when a server
// answers before the transport's last check of the body.
type answersFirst struct{ bodies []io.Reader }

func (a *answersFirst) Do(r *http.Request) (*http.Response, error) {
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, r.ContentLength)); err != nil {
		return nil, err
	}
	a.bodies = append(a.bodies, r.Body)
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:       io.NopCloser(strings.NewReader(`{"Successful":[],"Failed":[]}`)),
		Request:    r,
	}, nil
}

// net/http reads a request's body once more after writing it, to check
// that nothing is left, and the SDK has closed the body by then when the
// answer came first. That read ends cleanly, so the transport keeps the
// connection under the answer and the SDK does not send the call again.
func TestARequestBodyEndsCleanlyAfterTheSDKClosesIt(t *testing.T) {
	transport := &answersFirst{}
	c := awssqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", ""),
		HTTPClient:  awsconf.HTTPClient(transport),
	})
	_, err := c.SendMessageBatch(t.Context(), &awssqs.SendMessageBatchInput{
		QueueUrl: aws.String("http://127.0.0.1/q"),
		Entries:  []types.SendMessageBatchRequestEntry{{Id: aws.String("0"), MessageBody: aws.String("job")}},
	})
	if err != nil || len(transport.bodies) != 1 {
		t.Fatalf("send: %v, %d requests; want one answered request", err, len(transport.bodies))
	}
	if n, err := io.Copy(io.Discard, transport.bodies[0]); err != nil || n != 0 {
		t.Fatalf("the transport's last read of the closed body: %d bytes, %v; want a clean end", n, err)
	}
}
