package agentapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
)

// launchData remembers what each create call gave its machines.
type launchData struct {
	*sim.Cloud
	agent domain.AgentBootstrap
}

func (c *launchData) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	c.agent = spec.Agent
	return c.Cloud.Create(ctx, spec)
}

// launchTwo launches two machines in one create call, their rows written
// as the control plane writes them, and returns the rows and the launch's
// secret.
func (h *harness) launchTwo() ([]domain.Instance, string) {
	h.t.Helper()
	c := &launchData{Cloud: sim.New(h.Clock, sim.Options{Seed: 1})}
	h.t.Cleanup(c.Close)
	l := &launch.Launcher{Store: h.Store, Cloud: c, Clock: h.Clock, Verbs: domain.NewLifecycle(domain.Deadlines{}),
		ControllerID: "bullpen-test", AgentURL: "http://127.0.0.1:1"}
	rows := []domain.Instance{
		{ID: "bp-a", Pool: "linux", Role: domain.RoleHot, Runner: "small"},
		{ID: "bp-b", Pool: "linux", Role: domain.RoleHot, Runner: "small"},
	}
	res, err := l.Launch(h.Ctx, launch.Fleet{Rows: rows, Spec: domain.RunnerSpec{Name: "small"}, Image: "ami-1"})
	if err != nil || len(res.Booted) != 2 {
		h.t.Fatalf("launch: %d booted, %v", len(res.Booted), err)
	}
	return res.Booted, c.agent.Secret
}

// Two machines of one launch, as the launcher records them: A, holding its
// own valid secret, says hello with B's cloud id (cloud ids are not
// secret) and is refused, and so is anyone holding the launch's secret; B's
// token is not issued, and B's own hello then succeeds.
func TestASiblingCannotTakeTheIdentityOfAMachineOfItsLaunch(t *testing.T) {
	h := newHarness(t)
	rows, launchSecret := h.launchTwo()
	a, b := rows[0], rows[1]
	secretA, secretB := domain.MachineSecret(launchSecret, a.CloudID), domain.MachineSecret(launchSecret, b.CloudID)

	for name, secret := range map[string]string{"A's own secret": secretA, "the launch's secret": launchSecret} {
		w := h.do(http.MethodPost, agentapi.PathHello, "", helloBody(b.CloudID, b.LaunchID, secret))
		wantStatus(t, w, http.StatusUnauthorized, agentapi.CodeUnauthorized)
		if h.Get(b.ID).AgentTokenHash != "" {
			t.Fatalf("a hello as B with %s issued B's token", name)
		}
	}
	h.WantUnchanged(b)
	wantStatus(t, h.do(http.MethodPost, agentapi.PathHello, "", helloBody(a.CloudID, a.LaunchID, launchSecret)),
		http.StatusUnauthorized, agentapi.CodeUnauthorized)

	tokenB := h.hello(b, secretB)
	tokenA := h.hello(a, secretA)
	if tokenA == tokenB || h.Get(b.ID).AgentTokenHash != domain.HashSecret(tokenB) {
		t.Fatal("B's row does not hold B's own token")
	}
	for name, s := range map[string]string{"launch secret": launchSecret, "A's secret": secretA, "B's secret": secretB} {
		if strings.Contains(h.Logs.String(), s) {
			t.Errorf("the %s is in the logs", name)
		}
	}
}
