// Package ec2 is the domain.Cloud port on Amazon EC2. Machines are created
// with instant fleets (CreateFleet, type instant) from a launch template per
// runner that bullpen creates and versions itself, with one override per
// subnet and allowed instance type; they are started, stopped, terminated
// and tagged in calls of at most domain.MaxBatch ids, and listed by tag.
// Every instance and its volumes carry bullpen's tags from the create call
// on, so bullpen's state can be rebuilt from EC2 alone.
package ec2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// API is the part of EC2 the provider calls. *ec2.Client implements it;
// tests fake it where the emulator cannot behave as EC2 does (capacity
// errors, paging, throttling, pending windows).
type API interface {
	CreateFleet(context.Context, *ec2.CreateFleetInput, ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error)
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	CreateLaunchTemplateVersion(context.Context, *ec2.CreateLaunchTemplateVersionInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error)
	DeleteLaunchTemplateVersions(context.Context, *ec2.DeleteLaunchTemplateVersionsInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateVersionsOutput, error)
	DescribeLaunchTemplates(context.Context, *ec2.DescribeLaunchTemplatesInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	StartInstances(context.Context, *ec2.StartInstancesInput, ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error)
	StopInstances(context.Context, *ec2.StopInstancesInput, ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
}

var _ API = (*ec2.Client)(nil)

// Options configure the provider.
type Options struct {
	// Subnets are where machines launch: each is one override of every
	// fleet (its availability zone). At least one.
	Subnets []string
	// SecurityGroups are the machines' security groups; none means the
	// subnets' VPC default.
	SecurityGroups []string
	// InstanceProfile is the machines' IAM instance profile, by name or
	// ARN; "" for none.
	InstanceProfile string
	// ImageOwners are the accounts whose images an image name is looked up
	// in (account ids, or "self", "amazon"); default "self".
	ImageOwners []string
	// UserData renders a launch's user data (cloud-init that starts the
	// agent) from its bootstrap; nil launches machines without any.
	UserData func(domain.AgentBootstrap) (string, error)
	// ControllerID tags the launch templates bullpen creates, so that its
	// IAM policy can limit new versions to its own templates.
	ControllerID string
	// TemplatePrefix names the launch templates: PREFIX-RUNNER, with the
	// characters EC2 refuses in a name replaced and a hash added where
	// there are any (or the name is too long). Default "bullpen"; give
	// each stack its own when several share an account.
	TemplatePrefix string
	// SpotFallback launches on-demand what spot capacity could not give.
	// Default true (set DisableSpotFallback to turn it off).
	DisableSpotFallback bool
	// ImageTTL is how long a resolved image stays cached; default 5 min.
	ImageTTL time.Duration
	Clock    domain.Clock
	Log      *slog.Logger
}

// Cloud is the EC2 provider. It is safe for concurrent use.
type Cloud struct {
	api  API
	opts Options

	mu         sync.Mutex
	templates  map[string]string       // launch template id by name
	imageCache map[string]cachedImages // by the name asked for
	types      []typeInfo              // every instance type, once read
	// undeletedVersions are, by template id, the launch versions whose
	// delete failed, to delete with the template's next launch version.
	undeletedVersions map[string][]int64
	// warnedVersions are the templates whose failed deletes were warned
	// of, so that it is a warning once, not per launch.
	warnedVersions map[string]bool
	// makingTemplate holds, by name, the templates being found or created,
	// each closed when that is done: one at a time per name.
	makingTemplate map[string]chan struct{}
}

var _ domain.Cloud = (*Cloud)(nil)

// New returns the provider over api.
func New(api API, o Options) (*Cloud, error) {
	if api == nil {
		return nil, errors.New("ec2: no API client")
	}
	if len(o.Subnets) == 0 {
		return nil, errors.New("ec2: at least one subnet is required (--aws-subnets)")
	}
	if o.Clock == nil {
		return nil, errors.New("ec2: no clock")
	}
	if len(o.ImageOwners) == 0 {
		o.ImageOwners = []string{"self"}
	}
	if o.TemplatePrefix == "" {
		o.TemplatePrefix = "bullpen"
	}
	if o.ImageTTL <= 0 {
		o.ImageTTL = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Cloud{api: api, opts: o, templates: map[string]string{}, makingTemplate: map[string]chan struct{}{},
		imageCache: map[string]cachedImages{}, undeletedVersions: map[string][]int64{}, warnedVersions: map[string]bool{}}, nil
}

// Check verifies that the configured subnets and security groups exist,
// naming any that does not, so that serve refuses to start rather than fail
// at its first launch.
func (c *Cloud) Check(ctx context.Context) error {
	var errs []error
	sub, err := c.api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: c.opts.Subnets})
	if err != nil {
		errs = append(errs, fmt.Errorf("subnets %v: %w", c.opts.Subnets, mapError("DescribeSubnets", err)))
	} else if missing := missingIDs(c.opts.Subnets, subnetIDs(sub)); len(missing) > 0 {
		errs = append(errs, fmt.Errorf("subnets %v do not exist", missing))
	}
	if len(c.opts.SecurityGroups) > 0 {
		sg, err := c.api.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: c.opts.SecurityGroups})
		if err != nil {
			errs = append(errs, fmt.Errorf("security groups %v: %w", c.opts.SecurityGroups, mapError("DescribeSecurityGroups", err)))
		} else if missing := missingIDs(c.opts.SecurityGroups, groupIDs(sg)); len(missing) > 0 {
			errs = append(errs, fmt.Errorf("security groups %v do not exist", missing))
		}
	}
	return errors.Join(errs...)
}

func subnetIDs(out *ec2.DescribeSubnetsOutput) map[string]bool {
	ids := map[string]bool{}
	for _, s := range out.Subnets {
		ids[deref(s.SubnetId)] = true
	}
	return ids
}

func groupIDs(out *ec2.DescribeSecurityGroupsOutput) map[string]bool {
	ids := map[string]bool{}
	for _, g := range out.SecurityGroups {
		ids[deref(g.GroupId)] = true
	}
	return ids
}

func missingIDs(want []string, have map[string]bool) []string {
	var out []string
	for _, id := range want {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
