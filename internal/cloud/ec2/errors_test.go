package ec2_test

import (
	"errors"
	"testing"

	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// kindOf is the port's error kind err wraps, nil for none.
func kindOf(err error) error {
	for _, kind := range []error{domain.ErrInsufficientCapacity, domain.ErrThrottled, domain.ErrUnknownInstance,
		domain.ErrUnknownImage, domain.ErrInvalidRequest, domain.ErrUnauthorized} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return nil
}

// A fault on EC2's side that outlasted the SDK's retries, or a code this
// provider does not know, fails the launch without a kind: the jobs are
// tried again later, never rejected as an invalid request, whichever call
// of the launch met it.
func TestPassingFaultsFailALaunchWithoutRejectingIt(t *testing.T) {
	refuse := map[string]func(f *fakeAPI, err error){
		"CreateFleet": func(f *fakeAPI, err error) {
			f.fleet = func(int, *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) { return nil, err }
		},
		"DescribeImages":        func(f *fakeAPI, err error) { f.imagesErr = err },
		"DescribeInstanceTypes": func(f *fakeAPI, err error) { f.typesErr = err },
	}
	for op, inject := range refuse {
		for _, code := range []string{"InternalError", "InternalFailure", "Unavailable", "ServiceUnavailable", "ACodeEC2AddsLater"} {
			f := newFake()
			inject(f, apiError(code, "please try again"))
			_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(2, small))
			ce, ok := errors.AsType[*domain.CloudError](err)
			if !ok || ce.Op != op || ce.Code != code || kindOf(err) != nil {
				t.Errorf("%s answering %s: %v (kind %v); want the code kept and no kind", op, code, err, kindOf(err))
			}
		}
	}
}
