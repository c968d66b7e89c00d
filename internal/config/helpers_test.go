package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
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

// runnerBase is a file whose runner "r" continues on line 4 at column 5,
// where cases add their keys; runnerWith adds them, and after them the
// pools section every file needs.
const runnerBase = `runners:
  r:
    image: ubuntu
`

// runnerWith returns runnerBase with keys added to runner "r", and an
// empty pools section.
func runnerWith(keys string) string { return withPools(withKeys(runnerBase)(keys)) }

// withPools ends text with an empty pools section, so that cases about
// other sections are a valid file but for their own problems, on the
// lines they give.
func withPools(text string) string { return text + "pools: {}\n" }

// withKeys returns the file base is with keys added where its cases add
// theirs, indented by 4; with no keys, base itself.
func withKeys(base string) func(keys string) string {
	return func(keys string) string {
		if keys == "" {
			return base
		}
		return base + "    " + keys + "\n"
	}
}

// asIs takes a case's text as the whole file.
func asIs(text string) string { return text }

// poolWith parses poolBase with keys added to pool "p", and returns the
// pool.
func poolWith(t *testing.T, keys string) domain.Pool {
	t.Helper()
	p, ok := mustParse(t, withKeys(poolBase)(keys)).Pool("p")
	if !ok {
		t.Fatal("pool p missing")
	}
	return p
}

// problemCase is a configuration text and the problems Parse must report
// for it, in order.
type problemCase struct {
	name, text string
	want       []string
}

// checkProblems parses the file each case's text makes and wants exactly
// its problems.
func checkProblems(t *testing.T, file func(text string) string, cases []problemCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := file(c.text)
			sameLines(t, src, problems(t, src), c.want)
		})
	}
}

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
