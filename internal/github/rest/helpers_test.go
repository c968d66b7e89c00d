package rest_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// testToken is the PAT the tests' fakes require.
const testToken = "ghp_testTokenThatMustNeverLeak0123456789"

// newServer is a fake GitHub that accepts testToken alone.
func newServer(t *testing.T) *fakegh.Server {
	t.Helper()
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	srv.RequireToken(testToken)
	return srv
}

// newClient is a client of srv with testToken.
func newClient(t *testing.T, srv *fakegh.Server) *rest.Client {
	t.Helper()
	return newClientWith(t, srv, rest.Options{})
}

// newClientWith is a client of srv with testToken and the rest of opts.
func newClientWith(t *testing.T, srv *fakegh.Server, opts rest.Options) *rest.Client {
	t.Helper()
	opts.BaseURL, opts.Token = srv.URL(), testToken
	c, err := rest.New(opts)
	if err != nil {
		t.Fatalf("rest.New: %v", err)
	}
	return c
}
