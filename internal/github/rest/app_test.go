package rest_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

const (
	appID          = 4242
	installationID = 77
)

// newAppKey makes a GitHub App private key and its PEM, as GitHub hands
// it out (PKCS#1).
func newAppKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func newAppServer(t *testing.T, key *rsa.PrivateKey) *fakegh.Server {
	t.Helper()
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	srv.RequireApp(appID, installationID, &key.PublicKey)
	srv.AddRepo(repo)
	return srv
}

func TestAppAuthentication(t *testing.T) {
	key, keyPEM := newAppKey(t)
	srv := newAppServer(t, key)
	c, err := rest.New(rest.Options{BaseURL: srv.URL(), AppID: appID, InstallationID: installationID, PrivateKey: keyPEM})
	if err != nil {
		t.Fatalf("rest.New: %v", err)
	}
	reg, err := c.RegisterRunner(t.Context(), org, "app-runner", []string{"linux"})
	if err != nil {
		t.Fatalf("RegisterRunner as the App: %v", err)
	}
	runners, err := c.ListRunners(t.Context(), org)
	if err != nil || len(runners) != 1 || runners[0].ID != reg.RunnerID {
		t.Fatalf("ListRunners as the App = %v, %v", runners, err)
	}
	if _, err := c.QueuedJobs(t.Context(), org); err != nil {
		t.Fatalf("QueuedJobs as the App: %v", err)
	}
	if n := srv.TokenRequests(); n != 1 {
		t.Errorf("%d installation tokens fetched for one client, want 1 (reused until it expires)", n)
	}
	if !slices.Contains(srv.Requests(), "POST /app/installations/77/access_tokens") {
		t.Errorf("requests %q never asked for an installation token", srv.Requests())
	}
}

func TestAppCredentialsRejected(t *testing.T) {
	key, keyPEM := newAppKey(t)
	_, otherPEM := newAppKey(t)
	tests := []struct {
		name          string
		appID, instID int64
		key           []byte
	}{
		{"another key", appID, installationID, otherPEM},
		{"another app", appID + 1, installationID, keyPEM},
		{"another installation", appID, installationID + 1, keyPEM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newAppServer(t, key)
			c, err := rest.New(rest.Options{BaseURL: srv.URL(), AppID: tc.appID, InstallationID: tc.instID, PrivateKey: tc.key})
			if err != nil {
				t.Fatalf("rest.New: %v", err)
			}
			_, err = c.ListRunners(t.Context(), org)
			if !errors.Is(err, rest.ErrUnauthorized) || rest.IsTransient(err) {
				t.Errorf("ListRunners: %v, want ErrUnauthorized", err)
			}
			if !strings.Contains(err.Error(), "installation token") || !strings.Contains(err.Error(), "GitHub rejected the credentials") {
				t.Errorf("error %q does not say the App's credentials were rejected", err)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	_, keyPEM := newAppKey(t)
	tests := []struct {
		name string
		opts rest.Options
		want string
	}{
		{"no credentials", rest.Options{}, "a token or a GitHub App"},
		{"token and App", rest.Options{Token: testToken, AppID: 1, InstallationID: 2, PrivateKey: keyPEM}, "not both"},
		{"App without installation", rest.Options{AppID: 1, PrivateKey: keyPEM}, "installation id"},
		{"App without key", rest.Options{AppID: 1, InstallationID: 2}, "private key"},
		{"App with a key that is not PEM", rest.Options{AppID: 1, InstallationID: 2, PrivateKey: []byte("not a key")}, "private key"},
	}
	for _, tc := range tests {
		_, err := rest.New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := rest.New(rest.Options{Token: testToken}); err != nil {
		t.Errorf("a token alone: %v", err)
	}
	var _ domain.GitHub = (*rest.Client)(nil)
}
