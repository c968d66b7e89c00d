package fakegh_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

// The fake holds an App's JWT to GitHub's rules: signed by the App's key,
// issued by it, expiring in the future but at most ten minutes ahead.
func TestAppJWTRules(t *testing.T) {
	srv := fakegh.New()
	defer srv.Close()
	key, good := appKeyAndJWT(t, 4242)
	srv.RequireApp(4242, 77, &key.PublicKey)
	for _, tc := range []struct {
		name, jwt string
		want      int
		message   string
	}{
		{"a good token", good, http.StatusOK, ""},
		{"expiring an hour ahead", signJWT(t, key, 4242, time.Now().Add(time.Hour)), http.StatusUnauthorized, "too far in the future"},
		{"expired", signJWT(t, key, 4242, time.Now().Add(-time.Second)), http.StatusUnauthorized, "'exp'"},
		{"another App's", signJWT(t, key, 999, time.Now().Add(5*time.Minute)), http.StatusUnauthorized, "Integration not found"},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/app", nil)
		req.Header.Set("Authorization", "Bearer "+tc.jwt)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.message) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, resp.StatusCode, body, tc.want, tc.message)
		}
	}
}
