package agentapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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
		rows[id] = h.CreateInstance(domain.Instance{ID: id, State: domain.StateBooting, LaunchID: "lt-1",
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
	h.WantUnchanged(b)
	w := h.do(http.MethodPost, agentapi.PathHello, "", helloBody(b.CloudID, b.LaunchID, domain.MachineSecret(launch, b.CloudID)))
	wantStatus(t, w, http.StatusOK, "")
}

// stubProof accepts a document equal to "proof of " and the cloud id.
type stubProof struct{}

func (stubProof) Verify(cloudID, document, signature string) error {
	if document != "proof of "+cloudID || signature == "" {
		return errors.New("not this machine's")
	}
	return nil
}

// Where the provider signs a proof of the machine (EC2's identity
// document), hello requires it, so a sibling that could derive another's
// bootstrap secret still cannot take its identity.
func TestHelloRequiresTheProvidersProofWhenItHasOne(t *testing.T) {
	h := newHarness(t)
	srv := agentapi.New(h.Store, h.Service, h.Clock, nil, nil, agentapi.WithIdentity(stubProof{}))
	secret := domain.NewSecret()
	in := h.Launch("bp-1", domain.StateBooting, secret)
	hello := func(doc string) *httptest.ResponseRecorder {
		b, _ := json.Marshal(agentapi.HelloRequest{CloudID: in.CloudID, LaunchID: in.LaunchID, Bootstrap: secret,
			IdentityDocument: doc, IdentitySignature: "sig"})
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, agentapi.PathHello, strings.NewReader(string(b))))
		return w
	}
	for _, doc := range []string{"", "proof of i-bp-2"} {
		// Why a proof does not hold (another account, another region)
		// is the log's: the caller has shown no right to it.
		if w := hello(doc); w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "not this machine's") {
			t.Fatalf("hello with proof %q: %d %s, want 401 without the verifier's reason", doc, w.Code, w.Body)
		}
	}
	h.WantUnchanged(in)
	if w := hello("proof of " + in.CloudID); w.Code != http.StatusOK {
		t.Fatalf("hello with its own proof: %d, want 200", w.Code)
	}
}
