package ec2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Start starts stopped machines; pending and running ones are left as they
// are.
func (c *Cloud) Start(ctx context.Context, ids []string) error {
	return c.batch(ctx, ec2like.OpStartInstances, ids, func(ids []string) error {
		_, err := c.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids})
		return err
	})
}

// Stop stops running machines; stopping and stopped ones are left as they
// are.
func (c *Cloud) Stop(ctx context.Context, ids []string) error {
	return c.batch(ctx, ec2like.OpStopInstances, ids, func(ids []string) error {
		_, err := c.api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids})
		return err
	})
}

// Terminate terminates machines in any state.
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	return c.batch(ctx, ec2like.OpTerminateInstances, ids, func(ids []string) error {
		_, err := c.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
		return err
	})
}

// Tag adds tags to machines, overwriting the values of keys they have.
func (c *Cloud) Tag(ctx context.Context, ids []string, tags map[string]string) error {
	if len(tags) == 0 {
		return &domain.CloudError{Op: ec2like.OpCreateTags, Code: "MissingParameter", Err: fmt.Errorf("%w: no tags given", domain.ErrInvalidRequest)}
	}
	return c.batch(ctx, ec2like.OpCreateTags, ids, func(ids []string) error {
		// CreateTags takes any resource id, and not every endpoint refuses
		// an unknown one: the machines are checked first, with one describe
		// per batch.
		gone, err := c.missing(ctx, ids)
		if err != nil {
			return err
		}
		if len(gone) > 0 {
			return &domain.CloudError{Op: ec2like.OpCreateTags, Code: "InvalidInstanceID.NotFound",
				Err: &domain.UnknownInstancesError{Op: ec2like.OpCreateTags, IDs: gone}}
		}
		_, err = c.api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: ids, Tags: ec2Tags(tags)})
		return err
	})
}

// batch makes a call on at most domain.MaxBatch ids. EC2 fails the whole
// call when one id is unknown: the unknown ids are skipped and the call
// made again with the rest (domain.SkipUnknown). Where EC2 does not say
// which ids (or an emulator fails otherwise), the ids are checked with
// DescribeInstances before giving up. EC2 fails it as well over one
// machine it names that the call cannot act on (see refusedIDs): those are
// taken out too and the call made on the rest, so that one machine an
// operator protects, or one terminated behind bullpen's back, does not
// hold back the others at every try. Of the machines taken out so, those
// terminated or shutting down are reported as gone with the unknown ids;
// any other is reported in a *domain.RefusedInstancesError.
func (c *Cloud) batch(ctx context.Context, op string, ids []string, call func([]string) error) error {
	if len(ids) == 0 {
		return &domain.CloudError{Op: op, Code: "MissingParameter", Err: fmt.Errorf("%w: no instance ids", domain.ErrInvalidRequest)}
	}
	if len(ids) > domain.MaxBatch {
		return &domain.CloudError{Op: op, Code: "InvalidParameterValue",
			Err: fmt.Errorf("%w: %d instance ids, at most %d per call", domain.ErrInvalidRequest, len(ids), domain.MaxBatch)}
	}
	var refused []string
	var refusal *domain.CloudError // EC2's first, kept for its code and message
	err := domain.SkipUnknown(op, ids, func(ids []string) error {
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(refused, id) })
		for len(ids) > 0 {
			err := mapError(op, call(ids))
			named := refusedIDs(err, ids)
			if len(named) == 0 {
				return c.unknownAmong(ctx, op, ids, err)
			}
			if refusal == nil {
				refusal, _ = errors.AsType[*domain.CloudError](err)
			}
			refused = append(refused, named...)
			// A new slice: the one the call was given may still be read.
			ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(named, id) })
		}
		return nil
	}, func(err error) []string {
		if ids := domain.UnknownIDs(err); len(ids) > 0 {
			return ids
		}
		return unknownIDs(err)
	})
	if len(refused) == 0 || (err != nil && !errors.Is(err, domain.ErrUnknownInstance)) {
		return err
	}
	unknown := slices.Clone(domain.UnknownIDs(err))
	gone, still := c.splitGone(ctx, refused)
	unknown = append(unknown, gone...)
	if len(still) == 0 {
		return &domain.CloudError{Op: op, Code: refusal.Code, Err: &domain.UnknownInstancesError{Op: op, IDs: unknown}}
	}
	// EC2's own words: the sentinel mapError put before them says nothing
	// of the machines (UnsupportedOperation reads as an invalid request).
	reason := refusal.Err.Error()
	if s := sentinelOf(refusal.Code); s != nil {
		reason = strings.TrimPrefix(reason, s.Error()+": ")
	}
	return &domain.CloudError{Op: op, Code: refusal.Code, Err: &domain.RefusedInstancesError{
		Op: op, Code: refusal.Code, IDs: still, Unknown: unknown, Reason: reason}}
}

// unknownAmong is what a batch call on ids that failed with err says:
// err itself, unless EC2 might have refused it for an unknown id without
// naming it; then the ids are described, and the unknown ones named.
// Throttling, credentials and EC2's own faults are returned at once.
func (c *Cloud) unknownAmong(ctx context.Context, op string, ids []string, err error) error {
	if err == nil || len(unknownIDs(err)) > 0 || errors.Is(err, domain.ErrThrottled) || errors.Is(err, domain.ErrUnauthorized) ||
		isServerFault(codeOf(err)) {
		return err
	}
	if gone, merr := c.missing(ctx, ids); merr == nil && len(gone) > 0 {
		return &domain.CloudError{Op: op, Code: "InvalidInstanceID.NotFound", Err: &domain.UnknownInstancesError{Op: op, IDs: gone}}
	}
	return err
}

// refusalCodes are EC2's codes for a batch call refused over machines its
// message names: one in a state the call cannot change (a terminated
// machine to start, a pending one to stop), one an attribute protects
// (termination or stop protection), one the call does not apply to (a
// spot machine to stop).
var refusalCodes = []string{"IncorrectInstanceState", "OperationNotPermitted", "UnsupportedOperation"}

// refusedIDs returns the ids of a call on ids that EC2 refused it over, as
// its message names them, or nil when err is no such refusal or names no
// id of the call.
func refusedIDs(err error, ids []string) []string {
	ce, ok := errors.AsType[*domain.CloudError](err)
	if !ok || !slices.Contains(refusalCodes, ce.Code) {
		return nil
	}
	var named []string
	for _, id := range instanceIDs.FindAllString(ce.Err.Error(), -1) {
		if slices.Contains(ids, id) && !slices.Contains(named, id) {
			named = append(named, id)
		}
	}
	return named
}

// splitGone parts the machines a call was refused over into those that no
// longer exist for bullpen (terminated or shutting down, or no longer
// described) and the others. A describe that fails leaves them all with
// the others: they are reported as refused, not as gone.
func (c *Cloud) splitGone(ctx context.Context, ids []string) (gone, still []string) {
	found, err := c.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		unknown := unknownIDs(err)
		for _, id := range ids {
			if slices.Contains(unknown, id) {
				gone = append(gone, id)
			} else {
				still = append(still, id)
			}
		}
		return gone, still
	}
	state := map[string]domain.CloudState{}
	for _, m := range found {
		state[m.ID] = m.State
	}
	for _, id := range ids {
		switch s, ok := state[id]; {
		case !ok, s == domain.CloudTerminated, s == domain.CloudShuttingDown:
			gone = append(gone, id)
		default:
			still = append(still, id)
		}
	}
	return gone, still
}

// missing returns the ids of ids EC2 does not describe. EC2 names them
// when it refuses the set; only a refusal as unknown that names none (a
// malformed id) makes each id described on its own. Any other refusal is
// returned at once: under throttling, one describe per id would multiply
// the calls by the batch's size when the account can least afford them.
func (c *Cloud) missing(ctx context.Context, ids []string) ([]string, error) {
	_, err := c.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err == nil {
		return nil, nil
	}
	if found := unknownIDs(err); len(found) > 0 {
		return found, nil
	}
	if !errors.Is(err, domain.ErrUnknownInstance) {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		_, err := c.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		switch {
		case errors.Is(err, domain.ErrUnknownInstance):
			out = append(out, id)
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}

// List describes machines: with IDs, exactly those (terminated ones
// included; an unknown id is an error); without, every machine not
// terminated. Every tag of the filter must match. Every page is read.
func (c *Cloud) List(ctx context.Context, f domain.CloudFilter) ([]domain.CloudInstance, error) {
	in := &ec2.DescribeInstancesInput{}
	for k, v := range f.Tags {
		in.Filters = append(in.Filters, types.Filter{Name: aws.String("tag:" + k), Values: []string{v}})
	}
	if len(f.IDs) > 0 {
		in.InstanceIds = f.IDs
	} else {
		in.Filters = append(in.Filters, types.Filter{Name: aws.String("instance-state-name"),
			Values: []string{"pending", "running", "stopping", "stopped", "shutting-down"}})
	}
	out, err := c.describe(ctx, in)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b domain.CloudInstance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
	return out, nil
}

// describe reads every page of DescribeInstances.
func (c *Cloud) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]domain.CloudInstance, error) {
	var out []domain.CloudInstance
	p := ec2.NewDescribeInstancesPaginator(c.api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, mapError(ec2like.OpDescribeInstances, err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, view(i))
			}
		}
	}
	return out, nil
}

// view is a machine as the port describes it.
func view(i types.Instance) domain.CloudInstance {
	usage := "on-demand"
	if i.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
		usage = "spot"
	}
	var state domain.CloudState
	if i.State != nil {
		state = domain.CloudState(i.State.Name)
	}
	tags := make(map[string]string, len(i.Tags))
	for _, t := range i.Tags {
		tags[deref(t.Key)] = deref(t.Value)
	}
	return domain.CloudInstance{ID: deref(i.InstanceId), State: state, Tags: tags,
		InstanceType: string(i.InstanceType), UsageClass: usage, LaunchedAt: deref(i.LaunchTime)}
}

func ec2Tags(tags map[string]string) []types.Tag {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]types.Tag, len(keys))
	for i, k := range keys {
		out[i] = types.Tag{Key: aws.String(k), Value: aws.String(tags[k])}
	}
	return out
}
