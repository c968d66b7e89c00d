package app

import (
	"cmp"
	"context"
	"fmt"
	"maps"

	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
	"github.com/bullpen-ci/bullpen/internal/reaper"
)

// AWS configures the EC2 provider (--cloud aws). Credentials come from the
// SDK's default chain only, never from options.
type AWS struct {
	Region   string
	Endpoint string // an emulator's URL (moto); "" for AWS itself
	// Subnets, SecurityGroups and InstanceProfile are the machines'
	// network and role; serve checks at start that the first two exist.
	Subnets         []string
	SecurityGroups  []string
	InstanceProfile string
	ImageOwners     []string // where image names are looked up; default self
	TemplatePrefix  string   // launch templates are PREFIX-RUNNER; default the controller id
	// AgentURL and AgentSHA256 are where machines download the bullpen
	// binary, and its checksum; empty when it is baked into the image.
	AgentURL    string
	AgentSHA256 string
	// IdentityCertificate is AWS's RSA certificate for the region (PEM):
	// with it, an agent's hello must carry its machine's signed instance
	// identity document. Without it any machine of a launch could say
	// hello in a sibling's name (DESIGN: Agent credentials).
	IdentityCertificate []byte
	AccountID           string // the account identity documents must name; "" for any
	DisableSpotFallback bool
	// AgentEnv adds settings to the machines' agent (BULLPEN_AGENT_*), over
	// the default work directory, DefaultRunnerDir.
	AgentEnv map[string]string
}

// DefaultRunnerDir is where the image keeps GitHub's runner: the agent
// runs its runner command there.
const DefaultRunnerDir = "/home/runner"

func (o AWS) check() []string {
	var problems []string
	if o.Region == "" {
		problems = append(problems, "aws: no region (--aws-region)")
	}
	if len(o.Subnets) == 0 {
		problems = append(problems, "aws: no subnet (--aws-subnets)")
	}
	if (o.AgentURL == "") != (o.AgentSHA256 == "") {
		problems = append(problems, "aws: --aws-agent-url and --aws-agent-sha256 go together")
	}
	return problems
}

// newEC2 builds the EC2 provider, checks its subnets and security groups,
// and returns the verifier of instance identity documents, if any.
func (a *App) newEC2(ctx context.Context) (domain.IdentityVerifier, error) {
	o := a.opts.AWS
	extra := map[string]string{"BULLPEN_AGENT_WORK_DIR": DefaultRunnerDir}
	maps.Copy(extra, o.AgentEnv)
	// Checked here, or every machine's agent would refuse them at boot,
	// seen by nobody, while the pools launched more.
	if err := agent.CheckSettings(extra, agent.SettingsLimits{SilentAfter: cmp.Or(a.opts.Reaper.SilentAfter, reaper.DefaultSilentAfter)}); err != nil {
		return nil, fmt.Errorf("aws: --aws-agent-env: %w", err)
	}
	cloudInit := launchdata.CloudInitOptions{AgentURL: o.AgentURL, AgentSHA256: o.AgentSHA256, CloudIDFrom: "imds", Extra: extra}
	if err := cloudInit.Check(); err != nil {
		return nil, fmt.Errorf("aws: agent launch data: %w", err)
	}
	onCall, err := a.awsCalls()
	if err != nil {
		return nil, err
	}
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: o.Region, Endpoint: o.Endpoint, OnCall: onCall})
	if err != nil {
		return nil, err
	}
	prefix := o.TemplatePrefix
	if prefix == "" {
		prefix = a.opts.ControllerID
	}
	c, err := ec2.New(awsec2.NewFromConfig(cfg), ec2.Options{
		Subnets: o.Subnets, SecurityGroups: o.SecurityGroups, InstanceProfile: o.InstanceProfile,
		ImageOwners: o.ImageOwners, TemplatePrefix: prefix, ControllerID: a.opts.ControllerID, DisableSpotFallback: o.DisableSpotFallback,
		UserData: func(b domain.AgentBootstrap) (string, error) { return launchdata.CloudInit(b, cloudInit) },
		Clock:    a.opts.Clock, Log: a.opts.Log.With("loop", "ec2"),
	})
	if err != nil {
		return nil, err
	}
	if err := c.Check(ctx); err != nil {
		return nil, err
	}
	a.Cloud = c
	if len(o.IdentityCertificate) == 0 {
		a.opts.Log.Warn("agents' hellos are not checked against instance identity documents: a machine could say hello in a sibling's name before it does; set --aws-identity-certificate")
		return nil, nil
	}
	v, err := ec2.NewIdentity(o.IdentityCertificate, o.Region, o.AccountID)
	if err != nil {
		return nil, fmt.Errorf("aws: %w", err)
	}
	return v, nil
}
