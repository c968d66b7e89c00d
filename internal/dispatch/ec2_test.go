package dispatch

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// ec2Calls counts the EC2 operations a client makes.
type ec2Calls struct {
	mu sync.Mutex
	by map[string]int
}

func (c *ec2Calls) middleware(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countCalls",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.by[awsmiddleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

func (c *ec2Calls) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.by
	c.by = map[string]int{}
	return old
}

// ec2Burst serves a burst of n pool jobs from n stopped instances on the
// EC2 provider against moto, and returns the EC2 calls the dispatcher made
// by operation.
func ec2Burst(tb testing.TB, n int) map[string]int {
	tb.Helper()
	f := &fixture{World: testworld.New(tb, t0)}
	ctx, clk := f.Ctx, f.Clock
	calls := &ec2Calls{by: map[string]int{}}
	api := awsec2.NewFromConfig(mototest.Config(tb), func(o *awsec2.Options) { o.APIOptions = append(o.APIOptions, calls.middleware) })
	image, err := api.RegisterImage(ctx, &awsec2.RegisterImageInput{Name: aws.String(fmt.Sprintf("burst-%p", calls)),
		RootDeviceName: aws.String("/dev/xvda"), Architecture: "x86_64"})
	if err != nil {
		tb.Fatal(err)
	}
	subnets, err := api.DescribeSubnets(ctx, &awsec2.DescribeSubnetsInput{})
	if err != nil || len(subnets.Subnets) == 0 {
		tb.Fatalf("subnets: %v", err)
	}
	cloud, err := ec2.New(api, ec2.Options{Subnets: []string{aws.ToString(subnets.Subnets[0].SubnetId)}, Clock: clk, Log: f.Log,
		TemplatePrefix: fmt.Sprintf("burst-%p", calls)})
	if err != nil {
		tb.Fatal(err)
	}
	ms, err := cloud.Create(ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "small", Family: []string{"t3"}},
		ImageID: aws.ToString(image.ImageId), Count: n, Tags: map[string]string{domain.TagController: "burst"}})
	if err != nil || len(ms) != n {
		tb.Fatalf("create %d machines: %d, %v", n, len(ms), err)
	}
	for _, b := range domain.Chunk(cloudIDsOf(ms), domain.MaxBatch) {
		if err := cloud.Stop(ctx, b); err != nil {
			tb.Fatal(err)
		}
	}
	rows := make([]domain.Instance, n)
	for i, m := range ms {
		rows[i] = domain.Instance{ID: fmt.Sprintf("p-stopped-%04d", i), CloudID: m.ID, Pool: "p", Role: domain.RoleStopped,
			Runner: "small", State: domain.StateStopped, Deadline: t0.Add(24 * time.Hour)}
	}
	if err := f.Store.CreateInstances(ctx, rows); err != nil {
		tb.Fatal(err)
	}
	f.d = f.newDispatcher(cloud)
	f.queueJobs("p", 1, n)
	calls.reset()
	for total := 0; total < n; {
		res, err := f.d.Step(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if res.Received == 0 {
			tb.Fatalf("the queue ran dry after %d of %d jobs", total, n)
		}
		total += res.Assigned
	}
	return calls.reset()
}

// A burst of pool jobs on EC2 starts and detaches its instances in calls
// of at most 50: one StartInstances and one CreateTags per 50 jobs.
func TestBurstOnEC2CostsOneStartAndOneTagCallPer50Jobs(t *testing.T) {
	const n = 200
	calls := ec2Burst(t, n)
	for _, op := range []string{"StartInstances", "CreateTags"} {
		if calls[op] != n/domain.MaxBatch {
			t.Errorf("%s: %d calls for %d jobs, want %d", op, calls[op], n, n/domain.MaxBatch)
		}
	}
	t.Logf("EC2 calls for %d jobs: %v", n, calls)
}

// BenchmarkPoolBurstOnEC2 reports the EC2 calls per operation of a burst
// of 1,000 pool jobs served from 1,000 stopped instances, per 50 jobs.
func BenchmarkPoolBurstOnEC2(b *testing.B) {
	const n = 1000
	for b.Loop() {
		calls := ec2Burst(b, n)
		for op, c := range calls {
			b.ReportMetric(float64(c)*domain.MaxBatch/n, op+"/50jobs")
		}
	}
}
