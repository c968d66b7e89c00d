package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/app"
)

// awsFlags are serve's settings of the EC2 provider (--cloud aws).
// Credentials are the SDK's default chain's: the environment, the shared
// files, or the instance's role; never a flag.
type awsFlags struct {
	region, endpoint, subnets, groups, profile string
	owners, prefix, agentURL, agentSHA256      string
	identityCert, account                      string
	noSpotFallback                             bool
	agentEnv                                   map[string]string
}

func (f *awsFlags) define(fs *flag.FlagSet, serve *serveFlags) {
	str := func(p *string, name, env, def, usage string) { serve.envString(fs, p, name, env, def, usage) }
	region := serve.getenv("AWS_REGION")
	str(&f.region, "aws-region", "BULLPEN_AWS_REGION", region, "with --cloud aws or --store dynamodb://: the region (default $AWS_REGION)")
	str(&f.endpoint, "aws-endpoint", "BULLPEN_AWS_ENDPOINT", "", "with --cloud aws or --store dynamodb://: send every AWS call here (an emulator such as moto)")
	str(&f.subnets, "aws-subnets", "BULLPEN_AWS_SUBNETS", "", "with --cloud aws: subnet ids, comma-separated: each is one availability zone of every fleet")
	str(&f.groups, "aws-security-groups", "BULLPEN_AWS_SECURITY_GROUPS", "", "with --cloud aws: the machines' security group ids, comma-separated (default: the VPC's default group)")
	str(&f.profile, "aws-instance-profile", "BULLPEN_AWS_INSTANCE_PROFILE", "", "with --cloud aws: the machines' IAM instance profile, by name or ARN")
	str(&f.owners, "aws-image-owners", "BULLPEN_AWS_IMAGE_OWNERS", "self", "with --cloud aws: accounts whose images a runner's image name is looked up in, comma-separated (ids, self, amazon)")
	str(&f.prefix, "aws-template-prefix", "BULLPEN_AWS_TEMPLATE_PREFIX", "", "with --cloud aws: launch templates are named PREFIX-RUNNER (default: the controller id)")
	str(&f.agentURL, "aws-agent-url", "BULLPEN_AWS_AGENT_URL", "", "with --cloud aws: where machines download the bullpen binary (default: it is baked into the image)")
	str(&f.agentSHA256, "aws-agent-sha256", "BULLPEN_AWS_AGENT_SHA256", "", "with --aws-agent-url: the binary's SHA-256 (hex); machines refuse any other")
	str(&f.identityCert, "aws-identity-certificate", "BULLPEN_AWS_IDENTITY_CERTIFICATE", "", "with --cloud aws: AWS's RSA certificate for the region (PEM file): hellos must then carry the machine's signed identity document")
	str(&f.account, "aws-account-id", "BULLPEN_AWS_ACCOUNT_ID", "", "with --aws-identity-certificate: the account identity documents must name")
	fs.Func("aws-agent-env", "with --cloud aws: KEY=VALUE added to every machine's agent settings (repeatable), e.g. BULLPEN_AGENT_RUNNER_COMMAND=...; the runner runs in "+app.DefaultRunnerDir+" unless BULLPEN_AGENT_WORK_DIR says otherwise", keyValue(&f.agentEnv))
	fs.BoolVar(&f.noSpotFallback, "aws-no-spot-fallback", envDefault(serve, "aws-no-spot-fallback", "BULLPEN_AWS_NO_SPOT_FALLBACK", false, parseBool),
		"with --cloud aws: never launch on-demand what spot capacity could not give ($BULLPEN_AWS_NO_SPOT_FALLBACK=true)")
}

// options returns the provider's options, naming every problem.
func (f *awsFlags) options(agentURL string) (app.AWS, error) {
	var problems []error
	o := app.AWS{
		Region: f.region, Endpoint: f.endpoint, Subnets: list(f.subnets), SecurityGroups: list(f.groups),
		InstanceProfile: f.profile, ImageOwners: list(f.owners), TemplatePrefix: f.prefix,
		AgentURL: f.agentURL, AgentSHA256: f.agentSHA256, AccountID: f.account, DisableSpotFallback: f.noSpotFallback, AgentEnv: f.agentEnv,
	}
	if o.Region == "" {
		problems = append(problems, errors.New("--cloud aws needs --aws-region (or $AWS_REGION)"))
	}
	if len(o.Subnets) == 0 {
		problems = append(problems, errors.New("--cloud aws needs --aws-subnets: the subnets machines launch in"))
	}
	if agentURL == "" && f.endpoint == "" {
		problems = append(problems, errors.New("--cloud aws needs --agent-url: the address at which machines reach this control plane"))
	}
	if (f.agentURL == "") != (f.agentSHA256 == "") {
		problems = append(problems, errors.New("--aws-agent-url and --aws-agent-sha256 go together"))
	}
	if f.account != "" && f.identityCert == "" {
		problems = append(problems, errors.New("--aws-account-id is checked in identity documents: it needs --aws-identity-certificate"))
	}
	if f.identityCert != "" {
		pem, err := os.ReadFile(f.identityCert)
		if err != nil {
			problems = append(problems, fmt.Errorf("--aws-identity-certificate: %w", err))
		}
		o.IdentityCertificate = pem
	}
	return o, errors.Join(problems...)
}

// list splits a comma-separated flag, dropping empty items.
func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
