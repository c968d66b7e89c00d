package main

import (
	"bytes"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// serve names what it serves with, and warns when any of it is simulated:
// a production install that never read its settings file runs on the
// simulation otherwise without a word.
func TestServeSaysWhenItServesWithSimulatedProviders(t *testing.T) {
	for _, tc := range []struct {
		cloud, github string
		warn          string // the simulated providers named, "" for no warning
	}{
		{"sim", "sim", "simulated=cloud,github"},
		{"aws", "sim", "simulated=github"},
		{"sim", "app", "simulated=cloud"},
		{"aws", "app", ""},
	} {
		var buf bytes.Buffer
		f := serveFlags{cloud: tc.cloud, github: tc.github, environment: "production", store: "sqlite:///var/lib/bullpen/bullpen.db"}
		f.logProviders(slog.New(slog.NewTextHandler(&buf, nil)))
		logs := buf.String()
		if !strings.Contains(logs, "cloud="+tc.cloud+" github="+tc.github+" environment=production store=sqlite") {
			t.Errorf("%s/%s: the start does not name the providers:\n%s", tc.cloud, tc.github, logs)
		}
		warned := strings.Contains(logs, "level=WARN")
		if warned != (tc.warn != "") || (tc.warn != "" && !strings.Contains(logs, tc.warn)) {
			t.Errorf("%s/%s: want warning %q:\n%s", tc.cloud, tc.github, tc.warn, logs)
		}
	}
}

// Settings of a provider not in use are named at start: an --aws-subnets
// with the simulated cloud is likely a forgotten --cloud aws. --aws-region
// also serves DynamoDB and SQS, so it is never among them.
func TestServeNamesSettingsOfProvidersNotInUse(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	env := map[string]string{"BULLPEN_LOCAL_DIR": "/var/lib/machines"}
	f.define(fs, func(k string) string { return env[k] })
	if err := fs.Parse([]string{"--aws-subnets", "subnet-1", "--aws-region", "eu-west-1", "--github-app-id", "7"}); err != nil {
		t.Fatal(err)
	}
	got := unusedProviderFlags(&f, givenFlags(fs, func(k string) string { return env[k] }))
	if want := []string{"--aws-subnets", "--local-dir", "--github-app-id"}; !slices.Equal(got, want) {
		t.Errorf("unused provider flags %v, want %v", got, want)
	}
	f.cloud, f.github = "aws", "app"
	if got := unusedProviderFlags(&f, givenFlags(fs, func(k string) string { return env[k] })); !slices.Equal(got, []string{"--local-dir"}) {
		t.Errorf("with --cloud aws --github app: %v, want only --local-dir", got)
	}
}
