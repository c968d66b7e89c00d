package fakegh_test

import (
	"testing"
)

// Enterprise runners are reached with a personal access token only: an
// App's installation token is refused as GitHub refuses it (403), and an
// enterprise the fake does not know is 404.
func TestEnterpriseRoutesRefuseInstallationTokens(t *testing.T) {
	srv := newServer(t)
	key, jwt := appKeyAndJWT(t, 4242)
	srv.RequireApp(4242, 77, &key.PublicKey)
	srv.AddInstallation(77, "acme")
	srv.RequireToken("ghp_admin")
	srv.AddEnterprise("megacorp", "acme")
	token, _ := do(t, srv, "POST", "/app/installations/77/access_tokens", "", "Bearer "+jwt).json(t)["token"].(string)
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"personal access token", "/enterprises/megacorp/actions/runners", "Bearer ghp_admin", 200},
		{"installation token", "/enterprises/megacorp/actions/runners", "token " + token, 403},
		{"installation token, groups", "/enterprises/megacorp/actions/runner-groups", "token " + token, 403},
		{"unknown enterprise", "/enterprises/nobody/actions/runners", "Bearer ghp_admin", 404},
	}
	for _, tc := range tests {
		if a := do(t, srv, "GET", tc.path, "", tc.auth); a.status != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, a.status, tc.want, a.body)
		}
	}
}
