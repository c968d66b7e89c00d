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
// itself stays in domain.CloudError.Code. A code it does not list has no
// sentinel: the call failed, and is retried later. Only the codes below
// that say the request itself is wrong are ErrInvalidRequest, after which
// the provisioner rejects the jobs for good: a code EC2 adds tomorrow, a
// fault on EC2's side (InternalError, Unavailable) or a machine in the
// wrong state for now must never be read as one. Throttling, credentials
// and permissions read as awsconf classes them for every AWS service, so
// an expired key or a skewed clock is ErrUnauthorized rather than a
// request to split and retry.
func sentinelOf(code string) error {
	switch {
	case isCapacityCode(code):
		return domain.ErrInsufficientCapacity
	case strings.HasPrefix(code, "InvalidAMIID."), strings.HasPrefix(code, "InvalidAMIName."):
		return domain.ErrUnknownImage
	case code == "InvalidInstanceID.NotFound", code == "InvalidInstanceID.Malformed":
		return domain.ErrUnknownInstance
	case code == "Blocked", code == "OptInRequired", code == "PendingVerification":
		return domain.ErrUnauthorized
	case isInvalidRequestCode(code):
		return domain.ErrInvalidRequest
	}
	switch awsconf.CodeKind(code) {
	case awsconf.ErrThrottled:
		return domain.ErrThrottled
	case awsconf.ErrCredentials, awsconf.ErrDenied:
		// UnauthorizedOperation among them: a policy that lacks an action
		// or a resource is mended by an operator, and the jobs waiting
		// meanwhile are served once it is.
		return domain.ErrUnauthorized
	}
	return nil
}

// isCapacityCode says whether EC2 refused for want of room, which comes
// back as machines end or elsewhere (another zone, another type, spot
// falling back to on-demand). A subnet out of free addresses is one: its
// addresses come back as its machines are terminated, and another subnet
// of the fleet may have some.
func isCapacityCode(code string) bool {
	switch code {
	case "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
		"InsufficientReservedInstanceCapacity", "InsufficientVolumeCapacity", "InsufficientAddressCapacity",
		"InsufficientFreeAddressesInSubnet", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow",
		"InstanceLimitExceeded", "VcpuLimitExceeded", "UnfulfillableCapacity":
		return true
	}
	return false
}

// invalidRequestCodes are the client errors of EC2's error-code reference
// that say the request, as bullpen builds it from the configuration, can
// never succeed: a parameter or a combination EC2 refuses, one missing, a
// feature not offered (Unsupported: an instance type or option the region
// or zone does not have), user data EC2 cannot read, a client token reused
// for another request. Asking again the same way fails the same way.
var invalidRequestCodes = map[string]bool{
	"InvalidParameter": true, "InvalidParameterValue": true, "InvalidParameterCombination": true,
	"InvalidParameterDependency": true, "MissingParameter": true, "UnknownParameter": true,
	"InvalidAction": true, "MissingAction": true, "InvalidCharacter": true, "InvalidQueryParameter": true,
	"MalformedQueryString": true, "ValidationError": true, "IdempotentParameterMismatch": true,
	"InvalidBlockDeviceMapping": true, "InvalidInstanceType": true,
	// Malformed ids of launch templates; one that is not found is not
	// here: bullpen made it, someone deleted it, and the next launch makes
	// it again.
	"InvalidLaunchTemplateId.Malformed": true, "InvalidLaunchTemplateName.MalformedException": true,
}

// invalidRequestPrefixes are the families of such codes: the configured
// subnets and security groups (not found or malformed: they do not come
// into being on their own, and serve checks them at start), user data, and
// the Unsupported family.
var invalidRequestPrefixes = []string{
	"InvalidSubnetID.", "InvalidSubnet.", "InvalidGroup.", "InvalidGroupId.", "InvalidSecurityGroupID.",
	"InvalidUserData.", "Unsupported",
}

func isInvalidRequestCode(code string) bool {
	if invalidRequestCodes[code] {
		return true
	}
	for _, p := range invalidRequestPrefixes {
		if strings.HasPrefix(code, p) {
			return true
		}
	}
	return false
}

// isServerFault says whether EC2 failed on its side (its 5xx codes). The
// SDK has retried such a call already; bullpen's loops try again at their
// next cycle.
func isServerFault(code string) bool {
	switch code {
	case "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable":
		return true
	}
	return false
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
	return &domain.CloudError{Op: op, Code: code, Err: withSentinel(sentinelOf(code), awsconf.Shown(api))}
}

// withSentinel is EC2's message wrapping the port's error kind, or the
// message alone where the code has none.
func withSentinel(sentinel error, message string) error {
	if sentinel == nil {
		return errors.New(message)
	}
	return fmt.Errorf("%w: %s", sentinel, message)
}

// codeOf is the EC2 code an error carries, "" for none.
func codeOf(err error) string {
	if ce, ok := errors.AsType[*domain.CloudError](err); ok {
		return ce.Code
	}
	return ""
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
