package config

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration file, at a 1-based line and column.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error formats the problem as FILE:LINE:COL: message, the shape editors and
// CI annotations understand.
func (e Error) Error() string {
	if e.File == "" {
		return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Errors is every problem found in one file, sorted by position. Parse
// reports them all at once so that a user fixes a file in one round.
type Errors []Error

// Error joins the problems, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
}

// yamlLine matches the position yaml.v3 puts in its syntax errors: a line
// only, and none at all for problems on the first line.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// splitYAMLError separates a yaml.v3 error into its line (1 when it gives
// none) and its message.
func splitYAMLError(err error) (line int, msg string) {
	msg = err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n > 0 {
			return n, m[2]
		}
		return 1, m[2]
	}
	return 1, strings.TrimPrefix(msg, "yaml: ")
}
