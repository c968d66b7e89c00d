package autoscale

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// readmeTable returns the rows of the first Markdown table after heading,
// header row first, cells trimmed and code spans unwrapped.
func readmeTable(t *testing.T, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatalf("read README: %v", err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no heading %q", heading)
	}
	var rows [][]string
	for _, line := range strings.Split(after, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(c), "`")
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("README: no table under %q", heading)
	}
	return rows
}

// The worked timeline in README.md is what the code does, cell for cell.
func TestReadmeTimeline(t *testing.T) {
	rows := readmeTable(t, "## Worked timeline")
	header := strings.Join(rows[0], ",")
	if header != "t,demand,current,breach,score,action,new,reason" {
		t.Fatalf("README timeline header is %q", header)
	}
	p := DefaultParams()
	var st State
	current := -1
	seen := map[string]bool{}
	for _, row := range rows[1:] {
		tSec, err1 := strconv.ParseInt(row[0], 10, 64)
		demand, err2 := strconv.Atoi(row[1])
		docCurrent, err3 := strconv.Atoi(row[2])
		if err1 != nil || err2 != nil || err3 != nil || len(row) != 8 {
			t.Fatalf("README timeline row %q does not parse", row)
		}
		if current < 0 {
			current = docCurrent
		}
		d := Decide(p, &st, at(tSec), demand, current)
		score := "-"
		if d.Breach != "" {
			score = fmt.Sprintf("%.3f", d.Score)
		}
		got := []string{row[0], row[1], strconv.Itoa(current), d.Breach, score, d.Action, strconv.Itoa(d.New), d.Reason}
		if strings.Join(got, " | ") != strings.Join(row, " | ") {
			t.Errorf("README row differs from the code:\n README: %s\n   code: %s", strings.Join(row, " | "), strings.Join(got, " | "))
		}
		seen[d.Action] = true
		seen[d.Reason[:strings.Index(d.Reason, ":")]] = true
		current = d.New
	}
	for _, what := range []string{ActionUp, ActionDown, ActionNone, "stable"} {
		if !seen[what] {
			t.Errorf("the worked timeline never shows %q", what)
		}
	}
}

// The README's parameter table matches SeedParams and DefaultParams, read
// through the same environment variables a user would set.
func TestReadmeParameterTable(t *testing.T) {
	rows := readmeTable(t, "## Parameters and defaults")
	seedEnv, ourEnv := map[string]string{}, map[string]string{}
	for _, row := range rows[1:] {
		name := row[0]
		seedEnv[name] = leadingNumber(row[2])
		ourEnv[name] = leadingNumber(row[3])
	}
	if len(seedEnv) != len(paramOrder) {
		t.Errorf("README lists %d parameters, want %d", len(seedEnv), len(paramOrder))
	}
	// The specification's values do not validate; the error is beside the point here.
	seed, _ := ParamsFromEnv(func(k string) string { return seedEnv[k] })
	ours, err := ParamsFromEnv(func(k string) string { return ourEnv[k] })
	if seed != SeedParams() {
		t.Errorf("README seed defaults read as %+v, SeedParams is %+v", seed, SeedParams())
	}
	if err != nil || ours != DefaultParams() {
		t.Errorf("README bullpen defaults read as %+v (%v), DefaultParams is %+v", ours, err, DefaultParams())
	}
}

func leadingNumber(cell string) string {
	f := strings.Fields(strings.ReplaceAll(cell, "*", ""))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func TestReadmeQuotesTheValidationMessage(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	msg := problemLines(t, SeedParams().Validate())[0]
	if !strings.Contains(string(b), "    "+msg+"\n") {
		t.Errorf("README does not quote the validation message %q", msg)
	}
}
