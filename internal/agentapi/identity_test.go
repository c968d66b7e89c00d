package agentapi_test

import (
	"net/http"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Two machines of one launch: each row holds the hash of its own machine
// secret. A, holding its own secret, cannot introduce itself as B (cloud ids
// are not secret), nor can anyone with the launch's secret; B's own hello
// still works afterwards.
func TestASiblingCannotTakeAnotherMachinesIdentity(t *testing.T) {
	h := newHarness(t)
	launch := domain.NewSecret()
	rows := map[string]domain.Instance{}
	for _, id := range []string{"bp-a", "bp-b"} {
		rows[id] = h.Instance(domain.Instance{ID: id, State: domain.StateBooting, LaunchID: "lt-1",
			BootstrapHash: domain.HashSecret(domain.MachineSecret(launch, "i-"+id))})
	}
	a, b := rows["bp-a"], rows["bp-b"]
	for name, secret := range map[string]string{
		"a sibling's own secret": domain.MachineSecret(launch, a.CloudID),
		"the launch's secret":    launch,
	} {
		w := h.do(http.MethodPost, agentapi.PathHello, "", helloBody(b.CloudID, b.LaunchID, secret))
		wantStatus(t, w, http.StatusUnauthorized, agentapi.CodeUnauthorized)
		if got := h.Get(b.ID); got.AgentTokenHash != "" {
			t.Fatalf("hello with %s issued B's token", name)
		}
	}
	h.wantUnchanged(b)
	w := h.do(http.MethodPost, agentapi.PathHello, "", helloBody(b.CloudID, b.LaunchID, domain.MachineSecret(launch, b.CloudID)))
	wantStatus(t, w, http.StatusOK, "")
}
