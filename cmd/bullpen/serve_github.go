package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/app"
)

// githubFlags are serve's settings of a real GitHub (--github app or
// token). The token comes from a file or the environment, never a flag of
// its own: a command line is seen by every user of the host.
type githubFlags struct {
	url, appID, keyFile string
	tokenFile           string
	runnerGroup         string
	enterprise          string
	workFolder          string
	runnerGroupID       int64
	getenv              func(string) string
}

func (f *githubFlags) define(fs *flag.FlagSet, serve *serveFlags) {
	str := func(p *string, name, env, usage string) { serve.envString(fs, p, name, env, "", usage) }
	f.getenv = serve.getenv
	str(&f.url, "github-url", "BULLPEN_GITHUB_URL", "with --github app or token: the API root, for GitHub Enterprise Server https://HOST/api/v3/ (default GitHub.com's)")
	str(&f.appID, "github-app-id", "BULLPEN_GITHUB_APP_ID", "with --github app: the App's id")
	serve.defineSecretFile(fs, githubAppKey, &f.keyFile, "with --github app: the App's private key (PEM file)")
	serve.defineSecretFile(fs, githubToken, &f.tokenFile, "with --github token: file holding the token (else $BULLPEN_GITHUB_TOKEN or $GITHUB_TOKEN)")
	str(&f.enterprise, "github-enterprise", "BULLPEN_GITHUB_ENTERPRISE", "with --runner-scope enterprise: the enterprise's slug (needs --github token: a classic token with manage_runners:enterprise)")
	str(&f.runnerGroup, "runner-group", "BULLPEN_RUNNER_GROUP", "with --runner-scope org or enterprise: the runner group runners join, by name (default: the Default group)")
	str(&f.workFolder, "runner-work-folder", "BULLPEN_RUNNER_WORK_FOLDER", "with --github app or token: the runners' work directory, relative to the runner's (GitHub's default: _work)")
	fs.Int64Var(&f.runnerGroupID, "runner-group-id", 0, "with --runner-scope org or enterprise: the runner group by id, instead of --runner-group")
}

// options returns the GitHub settings for kind (app or token).
func (f *githubFlags) options(kind string) (app.GitHubAPI, error) {
	o := app.GitHubAPI{URL: f.url, RunnerGroupID: f.runnerGroupID, RunnerGroup: f.runnerGroup, WorkFolder: f.workFolder}
	var problems []error
	if f.runnerGroup != "" && f.runnerGroupID != 0 {
		problems = append(problems, errors.New("--runner-group and --runner-group-id name the same thing: give one"))
	}
	switch kind {
	case "app":
		id, err := strconv.ParseInt(f.appID, 10, 64)
		if err != nil || id <= 0 {
			problems = append(problems, fmt.Errorf("--github app needs --github-app-id, a positive number (got %q)", f.appID))
		}
		o.AppID = id
		key, given, err := githubAppKey.fromFile(f.getenv, f.keyFile)
		switch {
		case err != nil:
			problems = append(problems, err)
		case !given:
			problems = append(problems, errors.New("--github app needs --github-app-key-file, the App's private key"))
		}
		o.PrivateKey = []byte(key)
	case "token":
		token, err := githubToken.resolve(f.getenv, "", f.tokenFile)
		if err == nil && token == "" {
			token = strings.TrimSpace(f.getenv("GITHUB_TOKEN"))
		}
		switch {
		case err != nil:
			problems = append(problems, err)
		case token == "":
			problems = append(problems, errors.New("--github token needs a token: pass --github-token-file FILE, or set $BULLPEN_GITHUB_TOKEN_FILE, $BULLPEN_GITHUB_TOKEN or $GITHUB_TOKEN (never a flag)"))
		}
		o.Token = token
	}
	return o, errors.Join(problems...)
}
