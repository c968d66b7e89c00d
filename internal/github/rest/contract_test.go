package rest_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
)

// TestContract holds the REST client to the port's contract, against the
// fake GitHub, so the simulated and the real implementations cannot drift.
func TestContract(t *testing.T) {
	githubtest.Run(t, func(t *testing.T) githubtest.Harness {
		srv := newServer(t)
		// The suite registers runners in repositories no job names.
		srv.AutoCreate()
		const owner = "contract-org"
		srv.AddOrg(owner)
		srv.AddEnterprise("contract-enterprise", owner)
		h := srv.Harness(t, newClient(t, srv), owner)
		h.Enterprise = "contract-enterprise"
		return h
	})
}
