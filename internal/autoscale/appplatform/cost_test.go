package appplatform

import (
	"fmt"
	"testing"
)

// A poll of an organisation lists its repositories once, and each quiet
// repository's runs under the three run statuses that may hold active
// jobs: three calls a repository, where a listing per job status cost four
// and listed the repositories twice.
func TestAnOrganisationPollListsEachRepositoryOnce(t *testing.T) {
	r := newRig(t, map[string]string{EnvOwner: "", EnvRepo: "", EnvOrg: "acme", EnvRunnerNamePrefix: "bp-"})
	r.gh.AddOrg("acme")
	const repos = 60 + 1 // and the rig's own
	for i := range repos - 1 {
		r.gh.AddRepo(fmt.Sprintf("acme/repo-%d", i))
	}
	before := len(r.gh.Requests())
	if _, err := r.cycle(); err != nil {
		t.Fatal(err)
	}
	calls := r.gh.Requests()[before:]
	if n := r.gh.Count("GET /orgs/{org}/repos"); n != 1 {
		t.Errorf("the organisation's repositories were listed %d times in a poll, want once", n)
	}
	if n := r.gh.Count("GET /repos/{owner}/{repo}/actions/runs"); n != 3*repos {
		t.Errorf("%d run listings for %d quiet repositories, want %d", n, repos, 3*repos)
	}
	t.Logf("GitHub calls in one poll of %d quiet repositories: %d", repos, len(calls))
}
