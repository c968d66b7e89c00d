package main

import (
	"bytes"
	"log/slog"
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
