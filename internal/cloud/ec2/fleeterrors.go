package ec2

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// codeUnsupported is what an instant fleet reports for an override whose
// instance type is not offered in its subnet's availability zone.
const codeUnsupported = "Unsupported"

// Bounds of a fleet error's message: EC2 reports up to one error per
// override, and an override is one type in one subnet.
const (
	maxFleetCodes   = 6   // distinct codes named
	maxFleetMessage = 160 // characters of each code's first message
)

// fleetError is the error of an instant fleet that launched have of want
// machines, read from every error EC2 reported for it (one per pool it
// could not launch in, in no useful order). It is a shortage of capacity
// (domain.ErrInsufficientCapacity: retried later, spot falls back to
// on-demand) when any error is: a capacity code, or Unsupported for a
// type that some other override of the request can stand in for. It is
// also one when the fleet launched machines at all, since the request then
// is one EC2 can fill. Otherwise an error with no kind of the port's (a
// fault on EC2's side, a code not known here) makes the whole a failure
// to retry later, under that code: a request EC2 could not serve this
// time is not one it refuses. Only when every error says the request
// itself is wrong is the error that of the first such code
// (ErrInvalidRequest for most), after which the provisioner refuses the
// jobs for good.
func fleetError(errs []types.CreateFleetError, overrides []types.FleetLaunchTemplateOverridesRequest, have, want int) error {
	unsupported := unsupportedPools(errs, overrides)
	var capacityCode, poolCode, passingCode, configCode string
	passing := false
	for _, e := range errs {
		code := deref(e.ErrorCode)
		sentinel := sentinelOf(code)
		switch {
		case errors.Is(sentinel, domain.ErrInsufficientCapacity):
			capacityCode = or(capacityCode, code)
		case code == codeUnsupported && unsupported < len(overrides):
			poolCode = code
		case sentinel == nil:
			passingCode, passing = or(passingCode, code), true
		default:
			configCode = or(configCode, code)
		}
	}
	code, sentinel := configCode, sentinelOf(configCode)
	switch {
	case capacityCode != "" || poolCode != "" || have > 0:
		code, sentinel = or(capacityCode, or(poolCode, or(configCode, passingCode))), domain.ErrInsufficientCapacity
	case passing:
		code, sentinel = passingCode, nil
	}
	return &domain.CloudError{Op: ec2like.OpCreateFleet, Code: code,
		Err: withSentinel(sentinel, fmt.Sprintf("%d of %d machines: %s", have, want, fleetErrorSummary(errs)))}
}

// unsupportedPools counts the overrides of a request that an Unsupported
// error names; one that names none stands for every override when the
// request had a single one, and for none otherwise, so that a request
// whose types are offered somewhere is never refused for good over an
// error that does not say where.
func unsupportedPools(errs []types.CreateFleetError, overrides []types.FleetLaunchTemplateOverridesRequest) int {
	named := map[int]bool{}
	for _, e := range errs {
		if deref(e.ErrorCode) != codeUnsupported {
			continue
		}
		var o *types.FleetLaunchTemplateOverrides
		if e.LaunchTemplateAndOverrides != nil {
			o = e.LaunchTemplateAndOverrides.Overrides
		}
		for i, req := range overrides {
			if (o == nil && len(overrides) == 1) ||
				(o != nil && o.InstanceType == req.InstanceType && (o.SubnetId == nil || deref(o.SubnetId) == deref(req.SubnetId))) {
				named[i] = true
			}
		}
	}
	return len(named)
}

// fleetErrorSummary names each distinct code of a fleet's errors, how
// often it came and its first message, within maxFleetCodes codes.
func fleetErrorSummary(errs []types.CreateFleetError) string {
	var order []string
	count, message := map[string]int{}, map[string]string{}
	for _, e := range errs {
		code := or(deref(e.ErrorCode), "no code")
		if count[code] == 0 {
			order = append(order, code)
			message[code] = truncate(deref(e.ErrorMessage), maxFleetMessage)
		}
		count[code]++
	}
	parts := make([]string, 0, min(len(order), maxFleetCodes)+1)
	for _, code := range order[:min(len(order), maxFleetCodes)] {
		part := fmt.Sprintf("%s x%d", code, count[code])
		if message[code] != "" {
			part += " (" + message[code] + ")"
		}
		parts = append(parts, part)
	}
	if more := len(order) - maxFleetCodes; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more codes", more))
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
