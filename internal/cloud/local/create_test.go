package local

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

func TestDefaultCommandRunsTheAgentWithItsEnvFile(t *testing.T) {
	t.Setenv("BULLPEN_WEBHOOK_SECRET", "control-plane-secret")
	c := newCloud(t, Options{Binary: os.Args[0]})
	boot := domain.AgentBootstrap{URL: "http://127.0.0.1:8080", LaunchID: "launch-1", Secret: "s3cr'et value"}
	ms, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 1, Agent: boot})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	id := ms[0].ID
	waitState(t, c, id, domain.CloudStopped) // the fake agent reports and exits
	m, _ := c.Machine(id)

	log, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatalf("read agent.log: %v", err)
	}
	for _, want := range []string{
		"args=agent --config " + m.EnvFile + "\n",
		"wd=" + m.Dir + "\n",
		"env HOME=" + m.Dir + "\n",
		"env " + MachineEnv + "=" + id + "\n",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("agent.log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "control-plane-secret") {
		t.Errorf("the machine inherited the control plane's environment:\n%s", log)
	}

	info, err := os.Stat(m.EnvFile)
	if err != nil {
		t.Fatalf("stat env file: %v", err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("env file mode %o, want 600", mode)
	}
	got := sourceEnv(t, m.EnvFile, launchdata.EnvURL, launchdata.EnvLaunchID, launchdata.EnvBootstrap,
		launchdata.EnvCloudID, launchdata.EnvStateDir)
	// The machine holds its own secret, never the launch's.
	want := []string{boot.URL, boot.LaunchID, domain.MachineSecret(boot.Secret, id), id, m.StateDir}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("env file value %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// Two machines of one create call: each env file holds that machine's own
// secret, MachineSecret(launch secret, its id), as the agent reads it, and
// neither holds the launch's secret, so neither can introduce itself as the
// other.
func TestEachMachineOfALaunchHoldsOnlyItsOwnSecret(t *testing.T) {
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command})
	launch := domain.NewSecret()
	ms, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 2,
		Agent: domain.AgentBootstrap{URL: "http://127.0.0.1:8080", LaunchID: "lt-1", Secret: launch}})
	if err != nil || len(ms) != 2 {
		t.Fatalf("Create: %d machines, %v", len(ms), err)
	}
	secrets := map[string]string{}
	for _, in := range ms {
		m, _ := c.Machine(in.ID)
		text, err := os.ReadFile(m.EnvFile)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), launch) {
			t.Fatalf("the env file of %s holds the launch's secret", in.ID)
		}
		vars, err := agent.ParseEnvFile(string(text))
		if err != nil {
			t.Fatalf("the agent cannot read the env file of %s: %v", in.ID, err)
		}
		if _, ok := vars[launchdata.EnvLaunchSecret]; ok {
			t.Fatalf("the env file of %s names a launch secret", in.ID)
		}
		if vars[launchdata.EnvBootstrap] != domain.MachineSecret(launch, in.ID) {
			t.Fatalf("the env file of %s does not hold its machine's own secret", in.ID)
		}
		secrets[vars[launchdata.EnvBootstrap]] = in.ID
	}
	if len(secrets) != 2 {
		t.Fatal("the two machines hold the same secret")
	}
}

// A launch without a secret gives its machines none, rather than one
// anyone could derive from the cloud id.
func TestALaunchWithoutASecretGivesNone(t *testing.T) {
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command})
	ms := create(t, c, 1, nil)
	m, _ := c.Machine(ms[0])
	if got := sourceEnv(t, m.EnvFile, launchdata.EnvBootstrap)[0]; got != "" {
		t.Fatalf("the machine holds a bootstrap secret %q its launch never had", got)
	}
}

// sourceEnv reads the values of keys from an env file the way a shell
// does.
func sourceEnv(t *testing.T, file string, keys ...string) []string {
	t.Helper()
	script := `. "$1"; shift; for k; do eval "printf '%s\0' \"\$$k\""; done`
	out, err := exec.Command("sh", append([]string{"-c", script, "sh", file}, keys...)...).Output()
	if err != nil {
		t.Fatalf("source %s: %v", file, err)
	}
	vals := strings.Split(string(out), "\x00")
	if len(vals) != len(keys)+1 {
		t.Fatalf("source %s: %d values for %d keys", file, len(vals)-1, len(keys))
	}
	return vals[:len(keys)]
}

func TestBootstrapNoFileCanHoldIsRefused(t *testing.T) {
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command})
	_, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 1,
		Agent: domain.AgentBootstrap{URL: "http://127.0.0.1", Secret: "xyzzy\x00plugh"}})
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, ec2like.CodeInvalidParameter)
	if strings.Contains(err.Error(), "xyzzy") || strings.Contains(err.Error(), "plugh") {
		t.Errorf("error %q shows the secret", err)
	}
	if entries, _ := os.ReadDir(c.Dir()); len(entries) != 0 {
		t.Errorf("a refused Create left %d directories", len(entries))
	}
}

func TestCapacityAndPartialFulfilment(t *testing.T) {
	before := children(t)
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command, Capacity: 3})
	first := create(t, c, 2, nil)

	got, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 3})
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient)
	if len(got) != 1 {
		t.Fatalf("partial Create returned %d machines, want 1", len(got))
	}
	got, err = c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 1})
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient)
	if len(got) != 0 {
		t.Fatalf("Create at capacity returned %d machines", len(got))
	}
	if n := children(t); n != before+3 {
		t.Errorf("%d processes at capacity 3, want 3", n-before)
	}

	if err := c.Stop(t.Context(), first[:1]); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitState(t, c, first[0], domain.CloudStopped)
	_, err = c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-x", Count: 1})
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient) // stopped machines hold capacity

	if err := c.Terminate(t.Context(), first[:1]); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, first[0], domain.CloudTerminated)
	create(t, c, 1, nil)
}

func TestClientToken(t *testing.T) {
	before := children(t)
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command, Capacity: 3})
	spec := domain.LaunchSpec{ImageID: "local-x", Count: 2, ClientToken: "token-1",
		Tags: map[string]string{domain.TagPool: "a"}}
	first, err := c.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	again, err := c.Create(t.Context(), spec)
	if err != nil || strings.Join(machineIDs(again), ",") != strings.Join(machineIDs(first), ",") {
		t.Fatalf("repeated Create = %v, %v; want %v", machineIDs(again), err, machineIDs(first))
	}
	if n := children(t); n != before+2 {
		t.Errorf("%d processes after a repeated Create, want 2", n-before)
	}

	other := spec
	other.Count = 1
	_, err = c.Create(t.Context(), other)
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, ec2like.CodeIdempotentMismatch)

	// A partially fulfilled call answers its retries the same way.
	partial := domain.LaunchSpec{ImageID: "local-x", Count: 2, ClientToken: "token-2"}
	got, err := c.Create(t.Context(), partial)
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient)
	retry, retryErr := c.Create(t.Context(), partial)
	cloudtest.WantCode(t, retryErr, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient)
	if len(got) != 1 || len(retry) != 1 || retry[0].ID != got[0].ID {
		t.Errorf("retry of a partial Create = %v, want %v", machineIDs(retry), machineIDs(got))
	}

	// A call that launched nothing is not remembered.
	full := domain.LaunchSpec{ImageID: "local-x", Count: 1, ClientToken: "token-3"}
	_, err = c.Create(t.Context(), full)
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, ec2like.CodeInsufficient)
	if err := c.Terminate(t.Context(), machineIDs(first)); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	for _, id := range machineIDs(first) {
		waitState(t, c, id, domain.CloudTerminated)
	}
	if _, err := c.Create(t.Context(), full); err != nil {
		t.Errorf("retry once capacity freed: %v", err)
	}
}

func TestCreateThatCannotStartAProcessLaunchesNothing(t *testing.T) {
	var calls atomic.Int32
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Command: func(m Machine) *exec.Cmd {
		if calls.Add(1) == 2 {
			return exec.Command("/nonexistent/bullpen")
		}
		return h.command(m)
	}})
	spec := domain.LaunchSpec{ImageID: "local-x", Count: 3, ClientToken: "t",
		Tags: map[string]string{domain.TagPool: "a"}}
	_, err := c.Create(t.Context(), spec)
	var ce *domain.CloudError
	if !errors.As(err, &ce) || ce.Code != ec2like.CodeInternal {
		t.Fatalf("Create = %v, want an InternalError", err)
	}
	listed, err := c.List(t.Context(), domain.CloudFilter{IDs: nil, Tags: spec.Tags})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, m := range listed {
		waitState(t, c, m.ID, domain.CloudTerminated)
	}
	if entries, _ := os.ReadDir(c.Dir()); len(entries) != 0 {
		t.Errorf("a failed Create left %d directories", len(entries))
	}
	got, err := c.Create(t.Context(), spec)
	if err != nil || len(got) != 3 {
		t.Errorf("retry with the same token = %d machines, %v; want 3 new ones", len(got), err)
	}
}

func TestResolveImage(t *testing.T) {
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command})
	if id, err := c.ResolveImage(t.Context(), "ubuntu24", domain.RunnerSpec{}); err != nil || id != "local-ubuntu24" {
		t.Errorf("ResolveImage = %q, %v; want local-ubuntu24", id, err)
	}
	_, err := c.ResolveImage(t.Context(), "", domain.RunnerSpec{})
	cloudtest.WantCode(t, err, domain.ErrUnknownImage, ec2like.CodeAMINotFound)
}
