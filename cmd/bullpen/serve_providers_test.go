package main

import (
	"bytes"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
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
	got := unusedProviderFlags(&f, f.givenFlags(fs))
	if want := []string{"--aws-subnets", "--local-dir", "--github-app-id"}; !slices.Equal(got, want) {
		t.Errorf("unused provider flags %v, want %v", got, want)
	}
	f.cloud, f.github = "aws", "app"
	if got := unusedProviderFlags(&f, f.givenFlags(fs)); !slices.Equal(got, []string{"--local-dir"}) {
		t.Errorf("with --cloud aws --github app: %v, want only --local-dir", got)
	}
}

// On the simulated cloud, which starts empty, live instances in the store
// are an earlier run's: serve says so rather than closing them in silence.
func TestServeWarnsOfAnEarlierRunsInstancesOnTheSimulatedCloud(t *testing.T) {
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	st, _ := sqlitetest.Open(t, clock.NewVirtual(now))
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	warnSimulatedLeftovers(t.Context(), st, log)
	if buf.Len() != 0 {
		t.Fatalf("an empty store warned:\n%s", buf.String())
	}
	if err := st.CreateInstances(t.Context(), []domain.Instance{{ID: "bp-1", CloudID: "i-1", Pool: "p", Role: domain.RoleHot,
		Runner: "small", State: domain.StateReady, Deadline: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	warnSimulatedLeftovers(t.Context(), st, log)
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "instances=1") {
		t.Errorf("no warning of the earlier run's instance:\n%s", buf.String())
	}
}
