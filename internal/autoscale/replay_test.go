package autoscale

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The specification's burst timeline under bullpen's defaults, with a header, a
// blank line, CRLF endings and spaces around fields.
const burstTrace = "t,demand\r\n0,0\r\n60, 5\r\n\r\n120,8\r\n 180 ,6\r\n240,5\r\n"

const burstReplay = `{"t":0,"demand":0,"current":1,"action":"none","new":1}
{"t":60,"demand":5,"current":1,"action":"none","new":1}
{"t":120,"demand":8,"current":1,"action":"up","new":3}
{"t":180,"demand":6,"current":3,"action":"up","new":5}
{"t":240,"demand":5,"current":5,"action":"none","new":5}
`

func TestReplayGolden(t *testing.T) {
	cases := []struct {
		name    string
		p       Params
		trace   string
		initial int
		want    string
	}{
		{name: "burst", p: DefaultParams(), trace: burstTrace, initial: 1, want: burstReplay},
		{name: "seed parameters never scale", p: SeedParams(), trace: burstTrace, initial: 1,
			want: `{"t":0,"demand":0,"current":1,"action":"none","new":1}
{"t":60,"demand":5,"current":1,"action":"none","new":1}
{"t":120,"demand":8,"current":1,"action":"none","new":1}
{"t":180,"demand":6,"current":1,"action":"none","new":1}
{"t":240,"demand":5,"current":1,"action":"none","new":1}
`},
		{name: "scale down from the top without a header", p: DefaultParams(),
			trace: "0,0\n60,0\n120,0\n180,0\n240,0\n", initial: 5,
			want: `{"t":0,"demand":0,"current":5,"action":"none","new":5}
{"t":60,"demand":0,"current":5,"action":"down","new":4}
{"t":120,"demand":0,"current":4,"action":"none","new":4}
{"t":180,"demand":0,"current":4,"action":"none","new":4}
{"t":240,"demand":0,"current":4,"action":"down","new":3}
`},
		{name: "empty trace", p: DefaultParams(), trace: "t,demand\n\n", initial: 1, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Replay(tc.p, strings.NewReader(tc.trace), tc.initial, &out); err != nil {
				t.Fatalf("Replay: %v", err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%swant\n%s", out.String(), tc.want)
			}
		})
	}
}

func TestReplayBadTrace(t *testing.T) {
	cases := []struct {
		name, trace, want string
	}{
		{name: "three fields", trace: "t,demand\n0,1,2\n", want: `trace line 2: want two fields t,demand, got 3 in "0,1,2"`},
		{name: "one field", trace: "0\n", want: `trace line 1: want two fields t,demand, got 1 in "0"`},
		{name: "t not a number", trace: "0,1\nabc,1\n", want: `trace line 2: t "abc" is not a whole number of seconds`},
		{name: "t not whole", trace: "0.5,1\n", want: `trace line 1: t "0.5" is not a whole number of seconds`},
		{name: "t out of range", trace: "99999999999,1\n", want: `trace line 1: t "99999999999" is not a whole number of seconds`},
		{name: "demand not whole", trace: "0,1.5\n", want: `trace line 1: demand "1.5" is not a whole number`},
		{name: "negative demand", trace: "0,-1\n", want: `trace line 1: demand -1 is negative`},
		{name: "t repeated", trace: "0,1\n60,1\n60,2\n", want: `trace line 3: t=60 is not after the previous row's t=60`},
		{name: "t going back", trace: "0,1\n\n60,1\n30,2\n", want: `trace line 4: t=30 is not after the previous row's t=60`},
		{name: "a header after the first line", trace: "0,1\nt,demand\n", want: `trace line 2: t "t" is not a whole number of seconds`},
		{name: "every bad row at once", trace: "t,demand\n0,x\n60,1\n30,1\n90,-2\n",
			want: "trace line 2: demand \"x\" is not a whole number\n" +
				"trace line 4: t=30 is not after the previous row's t=60\n" +
				"trace line 5: demand -2 is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Replay(DefaultParams(), strings.NewReader(tc.trace), 1, &out)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %s", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("a bad trace wrote %q", out.String())
			}
		})
	}
}

func TestReplayMain(t *testing.T) {
	dir := t.TempDir()
	burstFile := filepath.Join(dir, "burst.csv")
	if err := os.WriteFile(burstFile, []byte(burstTrace), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(badFile, []byte("0,1\n0,1\n5,-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seedEnv := map[string]string{"DECAY_HALF_LIFE_SECONDS": "30", "BREACH_THRESHOLD": "2.0", "MAX_INSTANCES": "x"}
	cases := []struct {
		name      string
		args      []string
		env       map[string]string
		stdin     string
		code      int
		stdout    string
		stderrHas []string
	}{
		{name: "trace from a file", args: []string{"--trace", burstFile}, code: 0, stdout: burstReplay},
		{name: "trace from stdin", args: []string{"--trace", "-"}, stdin: burstTrace, code: 0, stdout: burstReplay},
		{name: "--initial", args: []string{"--trace=-", "--initial", "3"}, stdin: "0,3\n",
			code: 0, stdout: `{"t":0,"demand":3,"current":3,"action":"none","new":3}` + "\n"},
		{name: "initial defaults to MIN_INSTANCES", args: []string{"--trace", "-"}, env: map[string]string{"MIN_INSTANCES": "2"},
			stdin: "0,3\n", code: 0, stdout: `{"t":0,"demand":3,"current":2,"action":"none","new":2}` + "\n"},
		{name: "invalid parameters name every problem", args: []string{"--trace", burstFile}, env: seedEnv, code: 1,
			stderrHas: []string{
				"invalid parameters",
				`MAX_INSTANCES="x" is not a whole number (want e.g. 5)`,
				"BREACH_THRESHOLD=2.0 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=30 and STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125",
			}},
		{name: "bad trace", args: []string{"--trace", badFile}, code: 1,
			stderrHas: []string{"trace line 2: t=0 is not after the previous row's t=0", "trace line 3: demand -1 is negative"}},
		{name: "missing file", args: []string{"--trace", filepath.Join(dir, "nope.csv")}, code: 1, stderrHas: []string{"nope.csv"}},
		{name: "no --trace", args: nil, code: 2, stderrHas: []string{"usage: bullpen autoscale replay --trace FILE [--initial N]"}},
		{name: "help", args: []string{"-h"}, code: 0, stderrHas: []string{"usage:", "-initial N", "-trace FILE"}},
		{name: "unknown flag", args: []string{"--trace", "-", "--bogus"}, code: 2, stderrHas: []string{"bogus"}},
		{name: "stray argument", args: []string{"--trace", "-", "extra"}, code: 2, stderrHas: []string{"usage:"}},
		{name: "negative --initial", args: []string{"--trace", "-", "--initial", "-1"}, code: 2, stderrHas: []string{`invalid value "-1" for flag -initial: want a whole number, 0 or more`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return tc.env[k] }
			code := ReplayMain(tc.args, getenv, strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if stdout.String() != tc.stdout {
				t.Errorf("stdout\n%swant\n%s", stdout.String(), tc.stdout)
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
		})
	}
}
