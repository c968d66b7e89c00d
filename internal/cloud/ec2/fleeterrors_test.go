package ec2_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// fleetErr is one error of an instant fleet; pool is "TYPE@SUBNET" or ""
// for an error that names no override.
func fleetErr(code, pool string) types.CreateFleetError {
	e := types.CreateFleetError{ErrorCode: aws.String(code), ErrorMessage: aws.String("about " + or(pool, "the fleet"))}
	if typ, subnet, ok := strings.Cut(pool, "@"); ok {
		e.LaunchTemplateAndOverrides = &types.LaunchTemplateAndOverridesResponse{
			Overrides: &types.FleetLaunchTemplateOverrides{InstanceType: types.InstanceType(typ), SubnetId: aws.String(subnet)}}
	}
	return e
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The small runner's six overrides on the fake: three types in two subnets.
var smallPools = []string{"c7a.large@subnet-a", "c7a.large@subnet-b", "m7a.large@subnet-a", "m7a.large@subnet-b",
	"c7a.xlarge@subnet-a", "c7a.xlarge@subnet-b"}

func unsupportedEverywhere() []types.CreateFleetError { return everyPool("Unsupported") }

// everyPool is one error of code for each of the small runner's pools.
func everyPool(code string) []types.CreateFleetError {
	var out []types.CreateFleetError
	for _, p := range smallPools {
		out = append(out, fleetErr(code, p))
	}
	return out
}

// Every error of a fleet counts, not only the first: one capacity error,
// or a type not offered in one zone while other overrides remain, makes
// the fleet short of capacity (retried, spot falling back to on-demand).
// Only a fleet whose every error is the request's own fault is invalid.
func TestAFleetErrorIsReadFromAllItsErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		errs     []types.CreateFleetError
		launched int
		want     error
		code     string
	}{
		{"unsupported in one zone, short in another", []types.CreateFleetError{fleetErr("Unsupported", "c7a.large@subnet-a"),
			fleetErr("InsufficientInstanceCapacity", "c7a.large@subnet-b")}, 0, domain.ErrInsufficientCapacity, "InsufficientInstanceCapacity"},
		{"unsupported in one zone only", []types.CreateFleetError{fleetErr("Unsupported", "m7a.large@subnet-b")}, 0,
			domain.ErrInsufficientCapacity, "Unsupported"},
		{"unfulfillable", []types.CreateFleetError{fleetErr("UnfulfillableCapacity", "")}, 0, domain.ErrInsufficientCapacity, "UnfulfillableCapacity"},
		{"spot price too low after a bad parameter", []types.CreateFleetError{fleetErr("InvalidParameterValue", ""),
			fleetErr("SpotMaxPriceTooLow", "")}, 0, domain.ErrInsufficientCapacity, "SpotMaxPriceTooLow"},
		{"partly launched", []types.CreateFleetError{fleetErr("InvalidParameterValue", "")}, 1, domain.ErrInsufficientCapacity, "InvalidParameterValue"},
		{"unsupported in every override", unsupportedEverywhere(), 0, domain.ErrInvalidRequest, "Unsupported"},
		{"a bad parameter and unsupported everywhere", append([]types.CreateFleetError{fleetErr("InvalidParameterValue", "")},
			unsupportedEverywhere()...), 0, domain.ErrInvalidRequest, "InvalidParameterValue"},
		{"an unknown image", []types.CreateFleetError{fleetErr("InvalidAMIID.NotFound", "")}, 0, domain.ErrUnknownImage, "InvalidAMIID.NotFound"},
		{"no free address in any subnet", everyPool("InsufficientFreeAddressesInSubnet"), 0, domain.ErrInsufficientCapacity,
			"InsufficientFreeAddressesInSubnet"},
	} {
		f := newFake()
		f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
			out := fleetOf(tc.launched, n)
			out.Errors = tc.errs
			return out, nil
		}
		ms, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(3, small))
		var ce *domain.CloudError
		if len(ms) != tc.launched || !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.Code != tc.code {
			t.Errorf("%s: %d machines, %v; want %d, %v with code %s", tc.name, len(ms), err, tc.launched, tc.want, tc.code)
			continue
		}
		for _, e := range tc.errs {
			if !strings.Contains(err.Error(), *e.ErrorCode) {
				t.Errorf("%s: %v does not name %s", tc.name, err, *e.ErrorCode)
			}
		}
	}
}

// A fleet that failed in every pool on EC2's side, or with a code not
// known here beside others that say the request is wrong, failed this
// time: it fails without a kind, to be tried again, and the jobs are not
// rejected.
func TestAFleetThatFailedOnEC2sSideIsNotRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		errs []types.CreateFleetError
		code string
	}{
		{"an internal error in every pool", everyPool("InternalError"), "InternalError"},
		{"no code at all", []types.CreateFleetError{{}}, ""},
		{"a code not known here and a bad parameter", []types.CreateFleetError{fleetErr("InvalidParameterValue", ""),
			fleetErr("ACodeEC2AddsLater", "")}, "ACodeEC2AddsLater"},
	} {
		f := newFake()
		f.fleet = func(int, *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
			return &awsec2.CreateFleetOutput{Errors: tc.errs}, nil
		}
		ms, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(2, small))
		ce, ok := errors.AsType[*domain.CloudError](err)
		if len(ms) != 0 || !ok || ce.Code != tc.code || kindOf(err) != nil {
			t.Errorf("%s: %d machines, %v (kind %v); want none, code %q and no kind", tc.name, len(ms), err, kindOf(err), tc.code)
		}
	}
}

// A spot fleet refused in one zone for the type and short of capacity in
// the other still falls back to on-demand.
func TestSpotUnsupportedAndShortFallsBackToOnDemand(t *testing.T) {
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		if in.TargetCapacitySpecification.DefaultTargetCapacityType == types.DefaultTargetCapacityTypeSpot {
			return &awsec2.CreateFleetOutput{Errors: []types.CreateFleetError{fleetErr("Unsupported", "c7a.large@subnet-a"),
				fleetErr("InsufficientInstanceCapacity", "c7a.large@subnet-b")}}, nil
		}
		return fleetOf(int(*in.TargetCapacitySpecification.TotalTargetCapacity), n), nil
	}
	spot := small
	spot.Spot = "price-capacity-optimized"
	ms, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(2, spot))
	if err != nil || len(ms) != 2 || len(f.fleets) != 2 {
		t.Fatalf("%d machines in %d fleets, %v; want 2 on-demand after the spot fleet", len(ms), len(f.fleets), err)
	}
}

// A fleet's error names each distinct code once, with how often it came,
// and no more than a handful of them.
func TestAFleetErrorIsBounded(t *testing.T) {
	var errs []types.CreateFleetError
	for i := range 10 {
		for range 30 {
			errs = append(errs, fleetErr(fmt.Sprintf("Code%d", i), ""))
		}
	}
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		return &awsec2.CreateFleetOutput{Errors: errs}, nil
	}
	_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, small))
	if err == nil || strings.Count(err.Error(), "Code0") != 2 || !strings.Contains(err.Error(), "Code0 x30") ||
		!strings.Contains(err.Error(), "and 4 more codes") || len(err.Error()) > 1000 {
		t.Fatalf("got %v", err)
	}
}
