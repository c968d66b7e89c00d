package installations_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
)

// TestContract holds the App, routing each call to its account's
// installation, to the GitHub port's contract against the fake GitHub.
func TestContract(t *testing.T) {
	githubtest.Run(t, func(t *testing.T) githubtest.Harness {
		gh, key := twoAccounts(t)
		gh.AutoCreate() // the suite names repositories no job created
		gh.AddInstallation(103, "acme-other")
		return gh.Harness(t, newApp(t, gh, appID, key), "acme")
	})
}
