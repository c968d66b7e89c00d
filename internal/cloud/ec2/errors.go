package ec2

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// sentinelOf maps EC2's error codes to the port's typed errors; the code
// itself stays in domain.CloudError.Code. Throttling, credentials and
// permissions read as awsconf classes them for every AWS service, so an
// expired key or a skewed clock is ErrUnauthorized rather than a request
// to split and retry.
func sentinelOf(code string) error {
	switch {
	case code == "InsufficientInstanceCapacity", code == "InsufficientCapacity",
		code == "InsufficientHostCapacity", code == "InsufficientReservedInstanceCapacity",
		code == "MaxSpotInstanceCountExceeded", code == "SpotMaxPriceTooLow",
		code == "InstanceLimitExceeded", code == "VcpuLimitExceeded",
		code == "UnfulfillableCapacity":
		return domain.ErrInsufficientCapacity
	case strings.HasPrefix(code, "InvalidAMIID."), code == "InvalidAMIName.NotFound":
		return domain.ErrUnknownImage
	case code == "InvalidInstanceID.NotFound", code == "InvalidInstanceID.Malformed":
		return domain.ErrUnknownInstance
	case code == "Blocked", code == "OptInRequired", code == "PendingVerification":
		return domain.ErrUnauthorized
	}
	switch awsconf.CodeKind(code) {
	case awsconf.ErrThrottled:
		return domain.ErrThrottled
	case awsconf.ErrCredentials, awsconf.ErrDenied:
		return domain.ErrUnauthorized
	}
	return domain.ErrInvalidRequest
}

// mapError turns an error of call op into a *domain.CloudError keeping
// EC2's code. Errors that are not EC2's (a cancelled context, a network
// failure) are returned as they are, wrapped with op.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return fmt.Errorf("%s: %w", op, err)
	}
	code := api.ErrorCode()
	return &domain.CloudError{Op: op, Code: code, Err: fmt.Errorf("%w: %s", sentinelOf(code), awsconf.Shown(api))}
}

// instanceIDs finds instance ids in EC2's messages ("The instance IDs
// 'i-1, i-2' do not exist").
var instanceIDs = regexp.MustCompile(`\bi-[0-9a-f]{8,17}\b`)

// unknownIDs returns the ids an InvalidInstanceID error names, or nil when
// the error is another.
func unknownIDs(err error) []string {
	var ce *domain.CloudError
	if !errors.As(err, &ce) || !errors.Is(ce, domain.ErrUnknownInstance) {
		return nil
	}
	return instanceIDs.FindAllString(ce.Err.Error(), -1)
}
