package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/cloud/local"
	"github.com/bullpen-ci/bullpen/internal/spelling"
)

// variablePrefix starts the name of every variable of bullpen's.
const variablePrefix = "BULLPEN_"

// otherVariables are the BULLPEN_* variables that set no flag of serve
// but that a host running it may well have: the secrets' values, other
// commands' settings, those the agent and the local cloud's machines are
// given, and those bullpen's own tests read (scripts/test exports some to
// every test, serve's included).
var otherVariables = []string{
	webhookSecret.env, adminToken.env, viewerToken.env, githubToken.env,
	"BULLPEN_SERVER",         // status
	"BULLPEN_METRICS_LISTEN", // autoscale run
	agent.FirstBootEnv, local.MachineEnv,
	"BULLPEN_OPENAPI", "BULLPEN_OPENAPI_GHEC", "BULLPEN_SCREENSHOTS", "BULLPEN_REPLICAS_AWS_JOBS", "BULLPEN_REQUIRE_SHELLCHECK",
}

// strayVariable is a BULLPEN_* variable that nothing reads, with the
// known one it most likely misspells ("" for none).
type strayVariable struct {
	name, meant string
}

// strayVariables are the BULLPEN_* variables of environ that set no flag
// of serve and are none of otherVariables: a misspelt one (BULLPEN_ENVIROMENT)
// is otherwise ignored without a word, and serve starts with the default
// it was meant to change. The agent's settings (BULLPEN_AGENT_*) are the
// agent's to check. Only names are returned, never a value: it may be a
// secret.
func (f *serveFlags) strayVariables(environ []string) []strayVariable {
	known := map[string]bool{}
	for _, v := range otherVariables {
		known[v] = true
	}
	for _, v := range f.variables {
		known[v] = true
	}
	var out []strayVariable
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, variablePrefix) || known[name] || strings.HasPrefix(name, agent.EnvPrefix) {
			continue
		}
		out = append(out, strayVariable{name, nearestVariable(name, known)})
	}
	slices.SortFunc(out, func(a, b strayVariable) int { return strings.Compare(a.name, b.name) })
	return slices.CompactFunc(out, func(a, b strayVariable) bool { return a.name == b.name })
}

// nearestVariable is the known variable name most likely meant by name:
// its file form (a secret's value is read from $X_FILE only, for some),
// or the closest within a few edits; "" when none is that close.
func nearestVariable(name string, known map[string]bool) string {
	if known[name+"_FILE"] {
		return name + "_FILE"
	}
	// A typo is a few edits away; anything further is a guess.
	return spelling.Closest(strings.ToUpper(name), slices.Collect(maps.Keys(known)), 3)
}
