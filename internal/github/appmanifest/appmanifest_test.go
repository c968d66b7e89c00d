package appmanifest_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/appmanifest"
)

func TestManifestAsksForWhatBullpenUses(t *testing.T) {
	raw, err := appmanifest.Manifest(appmanifest.Options{Name: "bullpen-acme", HomepageURL: "https://bullpen.example.com",
		WebhookURL: "https://bullpen.example.com/webhook"})
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Name  string
		Hook  struct{ URL string } `json:"hook_attributes"`
		Perms map[string]string    `json:"default_permissions"`
		Ev    []string             `json:"default_events"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Hook.URL != "https://bullpen.example.com/webhook" || m.Name != "bullpen-acme" {
		t.Errorf("manifest %s", raw)
	}
	if m.Perms["administration"] != "write" || m.Perms["actions"] != "write" || m.Perms["contents"] != "read" {
		t.Errorf("permissions %v", m.Perms)
	}
	if !slices.Contains(m.Ev, "workflow_job") || !slices.Contains(m.Ev, "push") {
		t.Errorf("events %v", m.Ev)
	}
}

func TestManifestNamesEveryProblem(t *testing.T) {
	_, err := appmanifest.Manifest(appmanifest.Options{WebhookURL: "bullpen.example.com/webhook"})
	for _, want := range []string{"no App name", "--webhook-url \"bullpen.example.com/webhook\": want an absolute", "no --url"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}

func TestCreateURL(t *testing.T) {
	if got := appmanifest.CreateURL("https://github.com/", "acme"); got != "https://github.com/organizations/acme/settings/apps/new" {
		t.Error(got)
	}
	if got := appmanifest.CreateURL("https://ghe.example.com", ""); got != "https://ghe.example.com/settings/apps/new" {
		t.Error(got)
	}
}
