package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/testfixtures"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// call is a request's status and body.
func call(t *testing.T, method, url string, body []byte, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: generous}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With --admin-listen, the metrics are served there and not on --listen,
// which still takes GitHub's signed deliveries and answers a load
// balancer's health check with the verdict alone.
func TestServeWithAnAdminAddressKeepsTheOperatorsSurfacesThere(t *testing.T) {
	s := startServe(t, "--admin-listen", "127.0.0.1:0")
	if s.admin == "" || s.admin == s.addr {
		t.Fatalf("serving on %q, admin %q: want the admin address logged apart\n%s", s.addr, s.admin, s.logs)
	}
	public, admin := "http://"+s.addr, "http://"+s.admin

	if code, body := call(t, http.MethodGet, admin+"/metrics", nil, nil); code != http.StatusOK || !strings.Contains(body, "bullpen_") {
		t.Errorf("GET /metrics on the admin address: %d %.200q", code, body)
	}
	if code, body := call(t, http.MethodGet, public+"/metrics", nil, nil); code != http.StatusNotFound ||
		!strings.Contains(body, "not served on this address") || strings.Contains(body, s.admin) {
		t.Errorf("GET /metrics on the public address: %d %.200q, want a plain 404", code, body)
	}
	if code, body := call(t, http.MethodGet, public+"/healthz", nil, nil); code != http.StatusOK || body != `{"status":"ok"}`+"\n" {
		t.Errorf("GET /healthz on the public address: %d %q", code, body)
	}
	if code, body := call(t, http.MethodGet, admin+"/healthz", nil, nil); code != http.StatusOK || !strings.Contains(body, `"loops"`) {
		t.Errorf("GET /healthz on the admin address: %d %q, want the full report", code, body)
	}

	delivery := testfixtures.Payload(testfixtures.Job{ID: 41, RunID: 42, Labels: []string{"self-hosted"}})
	header := map[string]string{"X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "admin-split-1",
		"X-Hub-Signature-256": testfixtures.GoSign(hardeningSecret, delivery), "Content-Type": "application/json"}
	if code, body := call(t, http.MethodPost, public+"/webhook", delivery, header); code != http.StatusAccepted {
		t.Errorf("a signed delivery on the public address: %d %q, want 202", code, body)
	}
	if code, body := call(t, http.MethodPost, admin+"/webhook", delivery, header); code != http.StatusNotFound {
		t.Errorf("a signed delivery on the admin address: %d %q, want 404", code, body)
	}
	if code, _ := s.stop(t); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, s.logs)
	}
}

// An admin address already taken stops serve at start, with status 1 and
// the address named, before anything is served.
func TestServeExitsOneWhenTheAdminAddressIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	logs := &testlog.Buffer{}
	e, args := serveCommand(t, logs, "--admin-listen", taken.Addr().String())
	if code := run(context.Background(), e, args); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, logs)
	}
	if !strings.Contains(logs.String(), "--admin-listen: listen on "+taken.Addr().String()) {
		t.Fatalf("the taken address is not named:\n%s", logs)
	}
	if strings.Contains(logs.String(), "bullpen serving") {
		t.Fatalf("serve started with its admin address taken:\n%s", logs)
	}
}

// --admin-listen naming --listen's address is refused as a setting that
// cannot work, whether from the flag or its variable.
func TestServeRefusesAnAdminAddressThatIsTheListenAddress(t *testing.T) {
	const want = "--admin-listen 127.0.0.1:8080 is also --listen"
	code, _, errs := runCmd(t, "serve", "--listen", "127.0.0.1:8080", "--admin-listen", "127.0.0.1:8080")
	if code != exitConfig || !strings.Contains(errs, want) {
		t.Errorf("exit %d, %s; want %d saying %q", code, errs, exitConfig, want)
	}
	code, _, errs = runWithEnv(map[string]string{"BULLPEN_ADMIN_LISTEN": "127.0.0.1:8080"}, "serve")
	if code != exitConfig || !strings.Contains(errs, want) || !strings.Contains(errs, "--admin-listen came from $BULLPEN_ADMIN_LISTEN") {
		t.Errorf("from the variable: exit %d, %s", code, errs)
	}
}

// --admin-listen at --listen's port on an address that overlaps it,
// spelled otherwise (every address against one, a name against its
// address), is refused as the same address is, naming both settings:
// it could never bind, and exit 1 would be restarted for ever.
func TestServeRefusesAnAdminAddressOverlappingTheListenAddress(t *testing.T) {
	for _, pair := range [][2]string{
		{":18099", "127.0.0.1:18099"},
		{"127.0.0.1:18098", "0.0.0.0:18098"},
		{"0.0.0.0:18097", ":18097"},
		{"[::]:18096", "127.0.0.1:18096"},
		{"localhost:18095", "127.0.0.1:18095"},
	} {
		want := "--admin-listen " + pair[1] + " is also --listen " + pair[0]
		code, _, errs := runCmd(t, "serve", "--listen", pair[0], "--admin-listen", pair[1])
		if code != exitConfig || !strings.Contains(errs, want) {
			t.Errorf("--listen %s --admin-listen %s: exit %d, %s; want %d saying %q", pair[0], pair[1], code, errs, exitConfig, want)
		}
	}
	for _, pair := range [][2]string{
		{"127.0.0.1:0", "127.0.0.1:0"},
		{":8080", "127.0.0.1:8081"},
		{"127.0.0.1:8080", "127.0.0.2:8080"},
		{"10.0.0.5:8080", "127.0.0.1:8080"},
	} {
		f := &serveFlags{listen: pair[0], adminListen: pair[1]}
		if err := f.checkAdminListen(); err != nil {
			t.Errorf("--listen %s --admin-listen %s, which both bind: %v", pair[0], pair[1], err)
		}
	}
}
