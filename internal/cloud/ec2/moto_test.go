package ec2_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// motoImage registers, once, an image named cloudtest.Image in the
// emulator, as an operator's own AMI.
var motoImage struct {
	once sync.Once
	id   string
	err  error
}

func motoClient(t *testing.T) *awsec2.Client {
	t.Helper()
	return awsec2.NewFromConfig(mototest.Config(t))
}

// motoSubnets are the emulator's default subnets.
func motoSubnets(t *testing.T, api *awsec2.Client) []string {
	t.Helper()
	out, err := api.DescribeSubnets(t.Context(), &awsec2.DescribeSubnetsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range out.Subnets {
		ids = append(ids, aws.ToString(s.SubnetId))
	}
	return ids[:min(2, len(ids))]
}

func registerImage(t *testing.T, api *awsec2.Client) string {
	t.Helper()
	motoImage.once.Do(func() {
		out, err := api.RegisterImage(context.Background(), &awsec2.RegisterImageInput{
			Name: aws.String(cloudtest.Image), RootDeviceName: aws.String("/dev/xvda"), Architecture: "x86_64"})
		if err != nil {
			motoImage.err = err
			return
		}
		motoImage.id = aws.ToString(out.ImageId)
	})
	if motoImage.err != nil {
		t.Fatal(motoImage.err)
	}
	return motoImage.id
}

func newMotoCloud(t *testing.T, o ec2.Options) (*ec2.Cloud, *awsec2.Client) {
	t.Helper()
	api := motoClient(t)
	registerImage(t, api)
	if o.Subnets == nil {
		o.Subnets = motoSubnets(t, api)
	}
	o.Clock, o.Log = clock.Real{}, slog.New(slog.DiscardHandler)
	c, err := ec2.New(&fleetTokens{Client: api, seen: map[string]fleetAnswer{}}, o)
	if err != nil {
		t.Fatal(err)
	}
	return c, api
}

// fleetTokens gives the emulator's CreateFleet EC2's client tokens, which
// it ignores: a request made again with its token is answered as it was
// the first time, without a second fleet, and another request with the
// same token is refused as IdempotentParameterMismatch.
type fleetTokens struct {
	*awsec2.Client
	mu   sync.Mutex
	seen map[string]fleetAnswer
}

type fleetAnswer struct {
	request string
	out     *awsec2.CreateFleetOutput
}

func (f *fleetTokens) CreateFleet(ctx context.Context, in *awsec2.CreateFleetInput, opts ...func(*awsec2.Options)) (*awsec2.CreateFleetOutput, error) {
	token := aws.ToString(in.ClientToken)
	if token == "" {
		return f.Client.CreateFleet(ctx, in, opts...)
	}
	request, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if seen, ok := f.seen[token]; ok {
		if seen.request != string(request) {
			return nil, &smithy.GenericAPIError{Code: "IdempotentParameterMismatch",
				Message: "Client token already used before with different parameters."}
		}
		return seen.out, nil
	}
	out, err := f.Client.CreateFleet(ctx, in, opts...)
	if err == nil {
		f.seen[token] = fleetAnswer{request: string(request), out: out}
	}
	return out, err
}

func TestContractOnMoto(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) domain.Cloud {
		c, _ := newMotoCloud(t, ec2.Options{})
		return c
	})
}

// serve refuses to start on a subnet or security group that does not
// exist, naming it.
func TestCheckNamesWhatDoesNotExist(t *testing.T) {
	api := motoClient(t)
	good := motoSubnets(t, api)[0]
	c, _ := newMotoCloud(t, ec2.Options{Subnets: []string{good, "subnet-0bad0000000000000"}, SecurityGroups: []string{"sg-0bad0000000000000"}})
	err := c.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "subnet-0bad0000000000000") || !strings.Contains(err.Error(), "sg-0bad0000000000000") {
		t.Fatalf("check: %v, want both missing ids named", err)
	}
	ok, _ := newMotoCloud(t, ec2.Options{Subnets: []string{good}})
	if err := ok.Check(t.Context()); err != nil {
		t.Fatalf("check of an existing subnet: %v", err)
	}
}

// On the emulator too, one machine protected from termination does not
// keep the others of its batch running; it is named as refused.
func TestTerminateGoesOnBesideAProtectedMachineOnMoto(t *testing.T) {
	c, api := newMotoCloud(t, ec2.Options{})
	ctx := t.Context()
	img, err := c.ResolveImage(ctx, cloudtest.Image, domain.RunnerSpec{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Create(ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "protected", CPU: domain.Range{Min: 2, Max: 2}},
		ImageID: img, Count: 3, Tags: map[string]string{domain.TagController: "protected-" + t.Name()}})
	if err != nil || len(ms) != 3 {
		t.Fatalf("create: %d machines, %v", len(ms), err)
	}
	ids := []string{ms[0].ID, ms[1].ID, ms[2].ID}
	protect := func(on bool) error {
		_, err := api.ModifyInstanceAttribute(context.WithoutCancel(ctx), &awsec2.ModifyInstanceAttributeInput{
			InstanceId: aws.String(ids[1]), DisableApiTermination: &types.AttributeBooleanValue{Value: aws.Bool(on)}})
		return err
	}
	if err := protect(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if protect(false) == nil {
			_ = c.Terminate(context.WithoutCancel(ctx), ids[1:2])
		}
	})
	err = c.Terminate(ctx, ids)
	if refused, ok := errors.AsType[*domain.RefusedInstancesError](err); !ok || !slices.Equal(refused.IDs, ids[1:2]) || domain.TerminateDone(err) {
		t.Fatalf("terminate: %v; want %s named as refused", err, ids[1])
	}
	got, err := c.List(ctx, domain.CloudFilter{IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		ended := m.State == domain.CloudShuttingDown || m.State == domain.CloudTerminated
		if ended == (m.ID == ids[1]) {
			t.Errorf("%s is %s", m.ID, m.State)
		}
	}
}
