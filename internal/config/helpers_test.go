package config

import (
	"errors"
	"strings"
	"testing"
)

// poolBase is a valid file with a runner "small" and a pool "p" whose
// mapping continues on line 7 at column 5, where cases add their keys.
const poolBase = `runners:
  small:
    image: ubuntu
pools:
  p:
    runner: small
`

// runnerBase is a valid file whose runner "r" continues on line 4 at
// column 5, where cases add their keys.
const runnerBase = `runners:
  r:
    image: ubuntu
`

// problems parses src and returns its problems as "LINE:COL: message".
func problems(t *testing.T, src string) []string {
	t.Helper()
	cfg, err := Parse("", []byte(src))
	if err == nil {
		if cfg == nil {
			t.Fatal("Parse returned neither a config nor an error")
		}
		return nil
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want config.Errors: %v", err, err)
	}
	if cfg != nil {
		t.Error("Parse returned a config together with an error")
	}
	return strings.Split(errs.Error(), "\n")
}

// mustParse parses src and fails the test on any problem.
func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := Parse("test.yml", []byte(src))
	if err != nil {
		t.Fatalf("unexpected problems:\n%v\nin:\n%s", err, src)
	}
	return cfg
}

func sameLines(t *testing.T, src string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems differ\ninput:\n%s\ngot:\n  %s\nwant:\n  %s", src, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
