package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

func init() {
	register("version", "print the version of this binary: module version, source revision, Go version", cmdVersion)
}

func cmdVersion(_ context.Context, e *env, args []string) int {
	fs := e.flags("version")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	fmt.Fprintln(e.stdout, "bullpen", version())
	return 0
}

// version describes the binary from what the Go toolchain recorded in it:
// the module's version ("(devel)" for a build of a checkout), the source
// revision and its time, whether the tree had uncommitted changes, and the
// Go version.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	out := []string{info.Main.Version}
	if out[0] == "" {
		out[0] = "(devel)" // a test binary records none
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += "+modified"
		}
		out = append(out, rev)
	}
	if at := settings["vcs.time"]; at != "" {
		out = append(out, at)
	}
	return strings.Join(append(out, info.GoVersion), " ")
}
