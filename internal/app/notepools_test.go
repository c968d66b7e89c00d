package app

import (
	"log/slog"
	"testing"

	"github.com/bullpen-ci/bullpen/examples"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// A stack whose environment no pool of the file names is warned about,
// naming the file's environments, even when pools without environment:
// (served by every stack) make its pool count non-zero: with the example
// file and serve's default production only dependabot is served, and every
// job meant for dev goes unanswered.
func TestAnEnvironmentNoPoolNamesIsWarnedAbout(t *testing.T) {
	const runners = "runners:\n  small: {image: ubuntu-24.04}\npools:\n"
	const shared = "  dependabot:\n    runner: small\n"
	prodAndShared := runners + "  linux:\n    runner: small\n    environment: production\n" + shared
	example, err := config.Parse("examples/runs-on.yml", examples.RunsOn)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, env string
		cfg             *config.Config
		info, warn      string // warn "" when none is wanted
	}{
		{name: "a typo of production beside a shared pool", file: prodAndShared, env: "prod",
			info: `pools=1 served=dependabot other_environments=linux@production`,
			warn: `so only those naming none are served: set --environment to one of the file's environments`,
		},
		{name: "the example with serve's default", cfg: example, env: "production",
			info: `pools=1 served=dependabot other_environments=small-x64@dev,medium-x64@dev,burst-x64@dev`,
			warn: `file_environments=dev`,
		},
		{name: "no pool served at all", file: runners + "  a:\n    runner: small\n    environment: dev\n  b:\n    runner: small\n    environment: staging\n", env: "production",
			info: `pools=0 served="" other_environments=a@dev,b@staging`,
			warn: `no pool of the configuration is this environment's: set --environment to one of the file's environments to serve its pools and take its jobs`,
		},
		{name: "the example's own environment", cfg: example, env: "dev", info: `pools=4`},
		{name: "the file's environment in other case", cfg: example, env: "Dev", info: `pools=4`},
		{name: "the file's environment beside a shared pool", file: prodAndShared, env: "production", info: `pools=2 served=linux,dependabot`},
		{name: "a file naming no environment", file: runners + shared, env: "staging", info: `pools=1 served=dependabot other_environments=""`},
	} {
		cfg := tc.cfg
		if cfg == nil {
			if cfg, err = config.Parse("runs-on.yml", []byte(tc.file)); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		var logs testlog.Buffer
		a := &App{opts: Options{Environment: tc.env, ConfigPath: "runs-on.yml", Log: slog.New(slog.NewTextHandler(&logs, nil))}}
		a.notePools(cfg, "configuration in force")
		if got := logs.Lines("level=INFO", "configuration in force", "environment="+tc.env, tc.info); len(got) != 1 {
			t.Errorf("%s: no INFO line with %s in:\n%s", tc.name, tc.info, logs.String())
		}
		warnings := logs.Lines("level=WARN", "environment="+tc.env)
		switch {
		case tc.warn == "" && len(warnings) > 0:
			t.Errorf("%s: warned:\n%s", tc.name, logs.String())
		case tc.warn != "" && len(logs.Lines("level=WARN", "environment="+tc.env, tc.info, tc.warn)) != 1:
			t.Errorf("%s: no warning with %s and %s in:\n%s", tc.name, tc.info, tc.warn, logs.String())
		}
	}
}
