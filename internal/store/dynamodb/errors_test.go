package dynamodb

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// A refusal of the credentials keeps its code but not AWS's message, which
// may quote the signed request, a session token's header among it.
func TestARefusalOfTheCredentialsShowsNoMessage(t *testing.T) {
	err := describe("GetItem", "bullpen", &smithy.GenericAPIError{Code: "UnrecognizedClientException",
		Message: "The Canonical String for this request should have been 'x-amz-security-token:SESSIONSECRET'"})
	if !errors.Is(err, awsconf.ErrCredentials) || strings.Contains(err.Error(), "SESSIONSECRET") || !strings.Contains(err.Error(), "UnrecognizedClientException") {
		t.Fatalf("got %v", err)
	}
}
