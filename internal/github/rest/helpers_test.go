package rest_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// testToken is the PAT the tests' fakes require.
const testToken = "ghp_testTokenThatMustNeverLeak0123456789"

func newClient(t *testing.T, srv *fakegh.Server) *rest.Client {
	t.Helper()
	c, err := rest.New(rest.Options{BaseURL: srv.URL(), Token: testToken})
	if err != nil {
		t.Fatalf("rest.New: %v", err)
	}
	return c
}
