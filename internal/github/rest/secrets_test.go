package rest_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// TestSecretsStayOutOfErrors provokes every kind of failure with a token
// client and an App client holding a registration's JIT config, and looks
// for the token, the private key and the JIT config in every rendering of
// every error.
func TestSecretsStayOutOfErrors(t *testing.T) {
	key, keyPEM := newAppKey(t)
	srv := newAppServer(t, key)
	srv.RequireToken(testToken)
	tokenClient := newClient(t, srv)
	appClient, err := rest.New(rest.Options{BaseURL: srv.URL(), AppID: appID, InstallationID: installationID, PrivateKey: keyPEM})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tokenClient.RegisterRunner(t.Context(), org, "secret-holder", []string{"linux"})
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	collect := func(err error) {
		if err == nil {
			t.Errorf("a provoked failure did not fail (call %d)", len(errs))
		}
		errs = append(errs, err)
	}
	for _, c := range []*rest.Client{tokenClient, appClient} {
		_, err := c.RegisterRunner(t.Context(), org, "secret-holder", []string{"linux"})
		collect(err)
		collect(c.DeleteRunner(t.Context(), domain.Scope{Owner: "acme", Repo: "app"}, reg.RunnerID))
		srv.QueueJob(repo, []string{"linux"})
		// 429 last: after it the client waits out the retry-after itself.
		for _, status := range []int{401, 403, 422, 500, 429} {
			srv.FailNext("POST /orgs/{org}/actions/runners/generate-jitconfig", status, 1)
			_, err := c.RegisterRunner(t.Context(), org, "another", []string{"linux"})
			collect(err)
		}
		for _, status := range []int{401, 403, 422, 500, 429} {
			srv.FailNext("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs", status, 1)
			_, err = newClient(t, srv).ListJobs(t.Context(), org, rest.StatusQueued)
			collect(err)
		}
	}
	_, otherPEM := newAppKey(t)
	wrongApp, err := rest.New(rest.Options{BaseURL: srv.URL(), AppID: appID, InstallationID: installationID, PrivateKey: otherPEM})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrongApp.ListRunners(t.Context(), org)
	collect(err)
	_, err = rest.New(rest.Options{AppID: 1, InstallationID: 2, PrivateKey: keyPEM[:len(keyPEM)/2]})
	collect(err)
	_, err = rest.New(rest.Options{Token: testToken, AppID: 1, InstallationID: 2, PrivateKey: keyPEM})
	collect(err)
	unreachable := newClient(t, srv)
	srv.Close()
	_, err = unreachable.ListRunners(t.Context(), org)
	collect(err)

	secrets := secretsOf(testToken, keyPEM, otherPEM, reg.JITConfig)
	for _, err := range errs {
		if err == nil {
			continue
		}
		t.Log(err)
		for _, rendering := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			for _, s := range secrets {
				if strings.Contains(rendering, s) {
					t.Errorf("error %q holds a secret", rendering)
				}
			}
		}
	}
}

// secretsOf lists the strings that must never show: each secret whole,
// and each line of the PEM keys' bodies.
func secretsOf(token string, keys ...any) []string {
	out := []string{token}
	for _, k := range keys {
		switch k := k.(type) {
		case []byte:
			for _, line := range strings.Split(string(k), "\n") {
				if len(line) > 16 && !strings.HasPrefix(line, "-----") {
					out = append(out, line)
				}
			}
		case string:
			out = append(out, k)
		}
	}
	return out
}

func TestOptionsPrintWithoutSecrets(t *testing.T) {
	_, keyPEM := newAppKey(t)
	secrets := secretsOf(testToken, keyPEM)
	for _, opts := range []rest.Options{
		{BaseURL: "https://ghe.example.com/api/v3/", Token: testToken},
		{AppID: 1, InstallationID: 2, PrivateKey: keyPEM},
	} {
		var logged bytes.Buffer
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("github", "options", opts)
		slog.New(slog.NewTextHandler(&logged, nil)).Info("github", "options", opts)
		for _, rendering := range []string{fmt.Sprint(opts), fmt.Sprintf("%+v", opts), fmt.Sprintf("%#v", opts), fmt.Sprintf("%v", &opts), logged.String()} {
			for _, s := range secrets {
				if strings.Contains(rendering, s) {
					t.Errorf("options render as %q, with a secret", rendering)
				}
			}
			if !strings.Contains(rendering, "redacted") {
				t.Errorf("options render as %q, without saying what was redacted", rendering)
			}
		}
	}
}
