package main

import (
	"strings"
	"testing"
)

func TestGitHubAppManifest(t *testing.T) {
	code, out, errOut := runCmd(t, "github", "app-manifest", "--name", "bullpen-acme", "--url", "https://bullpen.example.com",
		"--webhook-url", "https://bullpen.example.com/webhook", "--org", "acme")
	if code != 0 || !strings.Contains(out, `"workflow_job"`) || !strings.Contains(errOut, "https://github.com/organizations/acme/settings/apps/new") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCmd(t, "github", "app-manifest", "--name", `<b>x</b>`, "--url", "https://b.example.com",
		"--webhook-url", "https://b.example.com/webhook", "--form")
	if code != 0 || !strings.Contains(out, `<form action="https://github.com/settings/apps/new" method="post">`) || strings.Contains(out, "<b>x</b>") {
		t.Fatalf("form: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, "github", "app-manifest", "--name", "x"); code != 2 || !strings.Contains(errOut, "no --webhook-url") {
		t.Fatalf("missing webhook: exit %d %s", code, errOut)
	}
}
