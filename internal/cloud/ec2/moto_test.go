package ec2_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

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
	c, err := ec2.New(api, o)
	if err != nil {
		t.Fatal(err)
	}
	return c, api
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
