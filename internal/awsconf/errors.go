package awsconf

import (
	"errors"

	"github.com/aws/smithy-go"
)

// What an operator can do about an AWS call that failed, for DynamoDB and
// SQS alike. Each says what to do, since the API's code alone does not.
var (
	// ErrThrottled: AWS refused the call for its rate. bullpen retries; a
	// throttling that lasts needs higher limits (the table's capacity mode,
	// the account's quotas).
	ErrThrottled = errors.New("throttled by AWS (bullpen retries; if it lasts, raise the DynamoDB table's capacity or the account's request quotas)")
	// ErrCredentials: AWS does not accept the credentials: unknown,
	// expired or missing keys, or a clock too far off to sign.
	ErrCredentials = errors.New("AWS refused the credentials (check the environment, profile or instance role bullpen runs with, and the machine's clock)")
	// ErrDenied: the credentials are valid but lack a permission.
	ErrDenied = errors.New("access denied (`bullpen aws iam-policy` prints the permissions bullpen needs)")
)

// Kind returns ErrThrottled, ErrCredentials or ErrDenied when err is an
// AWS API error of that kind, and nil otherwise.
func Kind(err error) error {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return nil
	}
	return CodeKind(api.ErrorCode())
}

// CodeKind is Kind of an AWS error code. The codes are those the JSON and
// query protocols of DynamoDB, SQS and EC2 answer with.
func CodeKind(code string) error {
	switch code {
	case "ThrottlingException", "Throttling", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
		"RequestThrottled", "AWS.SimpleQueueService.RequestThrottled", "TooManyRequestsException", "LimitExceededException":
		return ErrThrottled
	case "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "SignatureDoesNotMatch",
		"ExpiredToken", "ExpiredTokenException", "MissingAuthenticationToken", "MissingAuthenticationTokenException",
		"IncompleteSignature", "IncompleteSignatureException", "AuthFailure", "RequestExpired":
		return ErrCredentials
	case "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError":
		return ErrDenied
	}
	return nil
}

// Shown is what of an AWS API error's message may be shown in an error, a
// log or /healthz: all of it, but nothing for a refusal of the
// credentials, whose message may quote the request as AWS expected it
// signed, its headers and their values (a session token's among them).
func Shown(api smithy.APIError) string {
	if CodeKind(api.ErrorCode()) == ErrCredentials {
		return "(AWS's message is not shown: it may quote the signed request)"
	}
	return api.ErrorMessage()
}
