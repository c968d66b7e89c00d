// Package appmanifest builds the GitHub App manifest bullpen needs, so an
// administrator creates the App in one step (GitHub's manifest flow): the
// permissions, each for a reason, and the events bullpen listens to.
package appmanifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Permission is one permission the App asks for, and why.
type Permission struct {
	Name   string // as the manifest names it
	Access string // read or write
	Why    string
}

// Permissions are what bullpen calls, and nothing more.
var Permissions = []Permission{
	{"actions", "write", "read workflow runs and jobs (missed-webhook reconciliation, job status), cancel the run of a rejected job, re-run a job whose spot runner was interrupted"},
	{"administration", "write", "create just-in-time runners for repository-scoped runners, list them and delete dead ones"},
	{"organization_self_hosted_runners", "write", "the same for organisation-scoped runners, and resolve runner groups by name"},
	{"contents", "read", "read the pool configuration from a repository (--config github://…) and see pushes that change it"},
	{"metadata", "read", "required by GitHub for every App: list the installation's repositories"},
}

// Events are the webhook events bullpen handles.
var Events = []string{"workflow_job", "push"}

// Options describe the App to create.
type Options struct {
	Name        string // the App's name on GitHub; unique there
	HomepageURL string // shown on the App's page
	WebhookURL  string // bullpen serve's /webhook, as GitHub reaches it
	RedirectURL string // where GitHub sends the administrator after creation; optional
	Public      bool   // installable by other accounts
}

// Manifest returns the manifest as JSON.
func Manifest(o Options) ([]byte, error) {
	var problems []string
	if strings.TrimSpace(o.Name) == "" {
		problems = append(problems, "no App name (--name)")
	}
	if err := checkURL("--webhook-url", o.WebhookURL, true); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkURL("--url", o.HomepageURL, true); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkURL("--redirect-url", o.RedirectURL, false); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	perms := map[string]string{}
	for _, p := range Permissions {
		perms[p.Name] = p.Access
	}
	m := map[string]any{
		"name":                o.Name,
		"url":                 o.HomepageURL,
		"hook_attributes":     map[string]any{"url": o.WebhookURL, "active": true},
		"public":              o.Public,
		"default_permissions": perms,
		"default_events":      Events,
	}
	if o.RedirectURL != "" {
		m["redirect_url"] = o.RedirectURL
	}
	return json.MarshalIndent(m, "", "  ")
}

func checkURL(flag, raw string, required bool) error {
	if raw == "" {
		if required {
			return fmt.Errorf("no %s", flag)
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%s %q: want an absolute http(s) URL", flag, raw)
	}
	return nil
}

// CreateURL is where an administrator posts the manifest: the
// organisation's App settings, or the user's when org is empty. base is
// GitHub's web root (https://github.com, or a GitHub Enterprise Server's).
func CreateURL(base, org string) string {
	base = strings.TrimRight(base, "/")
	if org == "" {
		return base + "/settings/apps/new"
	}
	return base + "/organizations/" + url.PathEscape(org) + "/settings/apps/new"
}
