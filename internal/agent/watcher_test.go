package agent

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestLineWatcherMatchesWholeLinesOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   int // matches seen before flush
		after  int // after flush
	}{
		{"one write", []string{"Listening\nRunning job: build\n"}, 1, 1},
		{"split across writes", []string{"Run", "ning jo", "b: x\n"}, 1, 1},
		{"twice, reported once", []string{"Running job: a\nRunning job: b\n"}, 1, 1},
		{"last line without newline", []string{"x\nRunning job: a"}, 0, 1},
		{"no match", []string{"Running\njob:\n"}, 0, 0},
		{"after a very long line", []string{strings.Repeat("y", 3*maxLine), "\nRunning job: a\n"}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			n := 0
			w := &lineWatcher{pattern: regexp.MustCompile("Running job:"), out: &out, onMatch: func() { n++ }}
			for _, s := range tc.writes {
				if k, err := w.Write([]byte(s)); err != nil || k != len(s) {
					t.Fatalf("Write: %d, %v", k, err)
				}
			}
			if n != tc.want {
				t.Fatalf("%d matches before flush, want %d", n, tc.want)
			}
			w.flush()
			if n != tc.after || w.matched() != (tc.after > 0) {
				t.Fatalf("%d matches after flush, want %d", n, tc.after)
			}
			if out.String() != strings.Join(tc.writes, "") {
				t.Fatal("output not passed on unchanged")
			}
		})
	}
}

func TestChildEnvDropsTheAgentsSettings(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "BULLPEN_AGENT_BOOTSTRAP=s", "HOME=/root", "BULLPEN_AGENT_URL=x"})
	if strings.Join(got, " ") != "PATH=/bin HOME=/root" {
		t.Fatalf("got %q", got)
	}
}
