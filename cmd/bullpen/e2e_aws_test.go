package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// awsPools follows smallRunnerOn(image) in the configuration.
const awsPools = `  warm:
    runner: small
    schedule:
      - name: default
        hot: 1
        stopped: 1
`

// awsStack is bullpen serve --cloud aws on moto, with machines played by
// ec2Machines.
type awsStack struct {
	*server
	api      *awsec2.Client
	run      string // names this run's images, group and controller: moto outlives a test
	config   string // the --config file, rewritten to roll the pool
	machines *ec2Machines
}

// ec2World is what a serve on the EC2 emulator needs: images, a network,
// the machines' player with its runner, and the flags that point serve at
// them. run names this world's things (the emulator outlives a test).
type ec2World struct {
	endpoint, run, dir, bin, controller string
	api                                 *awsec2.Client
	subnets                             []string
	group                               string
	machines                            *ec2Machines
}

// newEC2World registers an image per name (prefix-RUN-name) and starts the
// machines' player, whose machines run runnerScript as their runner.
func newEC2World(t *testing.T, prefix, runnerScript string, images ...string) *ec2World {
	t.Helper()
	w := &ec2World{endpoint: mototest.Endpoint(t), api: awsec2.NewFromConfig(mototest.Config(t)),
		run: fmt.Sprintf("%x", time.Now().UnixNano()), dir: t.TempDir()}
	for _, name := range images {
		if _, err := w.api.RegisterImage(t.Context(), &awsec2.RegisterImageInput{
			Name: aws.String(w.image(prefix, name)), RootDeviceName: aws.String("/dev/xvda"), Architecture: types.ArchitectureValuesX8664}); err != nil {
			t.Fatal(err)
		}
	}
	w.subnets, w.group = motoNetwork(t, w.api, "bullpen-"+prefix+"-"+w.run)
	var err error
	if w.bin, err = buildBinary(); err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(w.dir, "runner.sh")
	if err := os.WriteFile(runner, []byte(runnerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	w.controller = "bullpen-" + prefix + "-" + w.run
	w.machines = newEC2Machines(t, w.api, w.bin, w.controller, runner)
	// The SDK in serve reads the emulator's dummy credentials from the
	// environment, and must not look for an instance role.
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return w
}

func (w *ec2World) image(prefix, name string) string { return prefix + "-" + w.run + "-" + name }

// serveFlags point serve at the emulator, its network and machines.
func (w *ec2World) serveFlags() []string {
	return []string{"--controller-id", w.controller,
		"--cloud", "aws", "--aws-region", mototest.Region, "--aws-endpoint", w.endpoint,
		"--aws-subnets", strings.Join(w.subnets, ","), "--aws-security-groups", w.group,
		"--aws-identity-certificate", w.machines.certPath, "--aws-account-id", motoAccount,
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s"}
}

func startAWS(t *testing.T) *awsStack {
	t.Helper()
	w := newEC2World(t, "e2e", fakeRunner, "v1", "v2")
	cfg := filepath.Join(w.dir, "runs-on.yml")
	writeConfig(t, cfg, w.image("e2e", "v1"))
	s := startServerWith(t, "", append([]string{"--config", cfg, "--environment", "e2e-aws", "--reload", "500ms"}, w.serveFlags()...)...)
	return &awsStack{server: s, api: w.api, run: w.run, config: cfg, machines: w.machines}
}

func writeConfig(t *testing.T, path, image string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(smallRunnerOn(image)+awsPools), 0o600); err != nil {
		t.Fatal(err)
	}
}

// motoNetwork returns two of the emulator's default subnets and a security
// group of their VPC, made for the test.
func motoNetwork(t *testing.T, api *awsec2.Client, group string) ([]string, string) {
	t.Helper()
	out, err := api.DescribeSubnets(t.Context(), &awsec2.DescribeSubnetsInput{})
	if err != nil || len(out.Subnets) == 0 {
		t.Fatalf("describe subnets: %v (%d)", err, len(out.Subnets))
	}
	var ids []string
	for _, s := range out.Subnets[:min(2, len(out.Subnets))] {
		ids = append(ids, aws.ToString(s.SubnetId))
	}
	sg, err := api.CreateSecurityGroup(t.Context(), &awsec2.CreateSecurityGroupInput{GroupName: aws.String(group),
		Description: aws.String("bullpen e2e runners"), VpcId: out.Subnets[0].VpcId})
	if err != nil {
		t.Fatal(err)
	}
	return ids, aws.ToString(sg.GroupId)
}

// poolInstances returns the stack's live instances of pool by EC2 state,
// as `aws ec2 describe-instances` filtered on bullpen's tags shows them.
func (s *awsStack) poolInstances(pool string) []types.Instance {
	s.t.Helper()
	out, err := s.api.DescribeInstances(s.t.Context(), &awsec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + domain.TagController), Values: []string{"bullpen-e2e-" + s.run}},
		{Name: aws.String("tag:" + domain.TagPool), Values: []string{pool}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}}}})
	if err != nil {
		s.t.Fatal(err)
	}
	var list []types.Instance
	for _, r := range out.Reservations {
		list = append(list, r.Instances...)
	}
	return list
}

func tag(in types.Instance, key string) string {
	for _, t := range in.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// warmOn reports whether pool holds one hot instance running and one
// stopped instance stopped on EC2, both of image, and the control plane
// counts them ready.
func (s *awsStack) warmOn(pool, image string) bool {
	var hot, stopped int
	for _, in := range s.poolInstances(pool) {
		if aws.ToString(in.ImageId) != image {
			return false
		}
		switch role, state := tag(in, domain.TagRole), in.State.Name; {
		case role == "hot" && state == types.InstanceStateNameRunning:
			hot++
		case role == "stopped" && state == types.InstanceStateNameStopped:
			stopped++
		default:
			return false // still warming, or on its way out
		}
	}
	counts := s.poolCounts(pool)
	return hot == 1 && stopped == 1 && counts["ready_hot"] == 1 && counts["stopped"] == 1
}

func (s *awsStack) poolError(pool string) string {
	var pools struct {
		Pools []struct {
			Name      string
			LastError string `json:"last_error"`
		}
	}
	s.get("/api/v1/pools", &pools)
	for _, p := range pools.Pools {
		if p.Name == pool {
			return p.LastError
		}
	}
	return ""
}

func imageID(t *testing.T, api *awsec2.Client, name string) string {
	t.Helper()
	out, err := api.DescribeImages(t.Context(), &awsec2.DescribeImagesInput{Filters: []types.Filter{
		{Name: aws.String("name"), Values: []string{name}}}})
	if err != nil || len(out.Images) != 1 {
		t.Fatalf("image %s: %v (%d found)", name, err, len(out.Images))
	}
	return aws.ToString(out.Images[0].ImageId)
}

// TestServeOnEC2 runs serve --cloud aws against moto: it converges a pool
// (the hot instance running, the stopped one stopped, as EC2 shows them),
// serves two signed pool jobs (the second by starting the stopped
// instance), and rolls the pool when its image changes.
func TestServeOnEC2(t *testing.T) {
	s := startAWS(t)
	v1, v2 := imageID(t, s.api, "e2e-"+s.run+"-v1"), imageID(t, s.api, "e2e-"+s.run+"-v2")
	s.eventually("the pool converges on EC2", 90*time.Second, func() bool { return s.warmOn("warm", v1) })
	var stoppedID string
	for _, in := range s.poolInstances("warm") {
		if tag(in, domain.TagRole) == "stopped" {
			stoppedID = aws.ToString(in.InstanceId)
		}
	}

	const first = 6_100_001
	for i, body := range queuedFor(t, 2, first, "runs-on=%d/pool=warm/env=e2e-aws") {
		id := fmt.Sprintf("aws-q-%d", first+i)
		if code, resp := s.post(id, body, testfixtures.GoSign(s.secret, body)); code != http.StatusAccepted {
			t.Fatalf("deliver %s: %d %s", id, code, resp)
		}
	}
	l := &localStack{server: s.server}
	var served []string
	for i := range 2 {
		j := l.waitJob(int64(first+i), "completed")
		served = append(served, l.instance(j.InstanceID).CloudID)
	}
	if served[0] == served[1] {
		t.Fatalf("both jobs ran on %s", served[0])
	}
	if served[0] != stoppedID && served[1] != stoppedID {
		t.Errorf("jobs ran on %v; want one on the started stopped instance %s", served, stoppedID)
	}
	s.eventually("the pool refills", 90*time.Second, func() bool { return s.warmOn("warm", v1) })

	writeConfig(t, s.config, "e2e-"+s.run+"-v2")
	s.eventually("the pool rolls to the new image", 120*time.Second, func() bool { return s.warmOn("warm", v2) })

	if strings.Contains(s.logs.String(), "level=ERROR") {
		t.Errorf("serve logged errors:\n%s", s.logs.String())
	}

	// A spot interruption notice on the hot instance: it leaves the pool at
	// once and the pool is refilled.
	var hot string
	for _, in := range s.poolInstances("warm") {
		if tag(in, domain.TagRole) == "hot" {
			hot = aws.ToString(in.InstanceId)
		}
	}
	s.machines.interrupt(hot)
	s.eventually("the interrupted instance leaves the pool, which is refilled", 60*time.Second, func() bool {
		for _, in := range s.poolInstances("warm") {
			if aws.ToString(in.InstanceId) == hot {
				return false
			}
		}
		return s.warmOn("warm", v2)
	})
	if !strings.Contains(s.logs.String(), "spot interruption: instance out of service") {
		t.Error("serve did not log the interruption")
	}

	// An image name that matches no AMI: the pool says so (an ERROR: a
	// human must fix the configuration) and keeps what it has.
	missing := "e2e-" + s.run + "-v3"
	writeConfig(t, s.config, missing)
	s.eventually("the pool reports the missing image", 30*time.Second, func() bool {
		return strings.Contains(s.poolError("warm"), missing)
	})
	if !s.warmOn("warm", v2) {
		t.Error("the pool let its instances go for an image that does not exist")
	}
}
