// Package examples carries the example configuration into the binary, so
// `bullpen demo` runs with no file at hand.
package examples

import _ "embed"

// RunsOn is examples/runs-on.yml.
//
//go:embed runs-on.yml
var RunsOn []byte
