package main

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

// An operator who puts a secret itself where its file's path belongs sees
// it neither in serve's help nor in any error, for each secret file.
func TestASecretPutWhereItsFileBelongsNeverShows(t *testing.T) {
	const leaked = "s3cr3t-value-not-a-path"
	const pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEleaked\n-----END RSA PRIVATE KEY-----"
	vars := map[string]string{
		"BULLPEN_WEBHOOK_SECRET_FILE": leaked + "-webhook",
		"BULLPEN_ADMIN_TOKEN_FILE":    leaked + "-admin",
		"BULLPEN_VIEWER_TOKEN_FILE":   leaked + "-viewer",
		"BULLPEN_GITHUB_APP_KEY_FILE": pem,
		"BULLPEN_GITHUB":              "app",
		"BULLPEN_GITHUB_APP_ID":       "1",
	}
	noLeak := func(what, text string) {
		t.Helper()
		if strings.Contains(text, leaked) || strings.Contains(text, "MIIE") {
			t.Errorf("%s shows a secret:\n%s", what, text)
		}
	}
	_, out, errOut := runWithEnv(vars, "serve", "-h")
	noLeak("serve -h", out+errOut)
	_, out, errOut = runWithEnv(vars, "serve", "--no-such-flag")
	noLeak("a flag error", out+errOut)

	f := &serveFlags{getenv: func(k string) string { return vars[k] }}
	_, _, err := f.secrets()
	if err == nil {
		t.Fatal("secrets read from files that do not exist")
	}
	noLeak("the secrets' error", err.Error())
	for _, want := range []string{"$BULLPEN_WEBHOOK_SECRET_FILE: cannot read the file it names", "$BULLPEN_ADMIN_TOKEN_FILE: cannot read the file it names"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not say %q", err, want)
		}
	}
	_, err = f.viewerToken("admin")
	if err == nil || !strings.Contains(err.Error(), "$BULLPEN_VIEWER_TOKEN_FILE") {
		t.Errorf("viewer token: %v", err)
	} else {
		noLeak("the viewer token's error", err.Error())
	}
	g := &githubFlags{getenv: f.getenv, appID: "1"}
	if _, err := g.options("app"); err == nil || !strings.Contains(err.Error(), "$BULLPEN_GITHUB_APP_KEY_FILE: cannot read") {
		t.Errorf("App key: %v", err)
	} else {
		noLeak("the App key's error", err.Error())
	}
	_, _, errOut = runWithEnv(vars, "status", "--server", "http://127.0.0.1:1")
	noLeak("status", errOut)
}

// A file setting names where its secret came from; the flag wins over the
// variable, an empty file is refused as such, and a value loses the line
// end around it as a file's does.
func TestSecretFilesResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	fromFlag, fromEnv, empty := write("flag", "from-flag\n"), write("env", "from-env-file"), write("empty", " \n")
	vars := map[string]string{"BULLPEN_ADMIN_TOKEN_FILE": fromEnv, "BULLPEN_ADMIN_TOKEN": "from-env"}
	getenv := func(k string) string { return vars[k] }
	for _, c := range []struct {
		name, value, file, want, err string
		getenv                       func(string) string
	}{
		{"the file flag over the variables", "", fromFlag, "from-flag", "", getenv},
		{"the value flag over the variables", "from-value-flag", "", "from-value-flag", "", getenv},
		{"the file variable over the value variable", "", "", "from-env-file", "", getenv},
		{"the value flag", "from-value-flag", "", "from-value-flag", "", nil},
		{"the value variable", "", "", "from-env", "", func(k string) string { return map[string]string{"BULLPEN_ADMIN_TOKEN": "from-env"}[k] }},
		{"nothing", "", "", "", "", nil},
		{"a variable ending in a newline", "", "", "from-env", "", func(k string) string { return map[string]string{"BULLPEN_ADMIN_TOKEN": " from-env\n"}[k] }},
		{"a flag ending in a newline", "from-value-flag\r\n", "", "from-value-flag", "", nil},
		{"an empty file", "", empty, "", "--admin-token-file names an empty file", getenv},
	} {
		got, err := adminToken.resolve(c.getenv, c.value, c.file)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
	}
}

// --github token reads its token from a file, as the admin token's is
// read (the systemd unit's credentials are files), the flag over
// $BULLPEN_GITHUB_TOKEN_FILE over the variables; a file that cannot be
// read is named by its setting, never by its path.
func TestServeReadsTheGitHubTokenFromAFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	fromFlag, fromEnv := write("flag", "ghp_from_flag\n"), write("env", "ghp_from_env_file")
	missing := filepath.Join(dir, "ghp_put_where_the_path_goes")
	for _, c := range []struct {
		name  string
		args  []string
		vars  map[string]string
		want  string
		error string
	}{
		{"the file flag", []string{"--github-token-file", fromFlag}, map[string]string{"BULLPEN_GITHUB_TOKEN_FILE": fromEnv, "BULLPEN_GITHUB_TOKEN": "ghp_var"}, "ghp_from_flag", ""},
		{"the file variable", nil, map[string]string{"BULLPEN_GITHUB_TOKEN_FILE": fromEnv, "BULLPEN_GITHUB_TOKEN": "ghp_var"}, "ghp_from_env_file", ""},
		{"the variable", nil, map[string]string{"BULLPEN_GITHUB_TOKEN": "ghp_var", "GITHUB_TOKEN": "ghp_other"}, "ghp_var", ""},
		{"GitHub's variable", nil, map[string]string{"GITHUB_TOKEN": "ghp_other"}, "ghp_other", ""},
		{"an unreadable file", []string{"--github-token-file", missing}, map[string]string{"GITHUB_TOKEN": "ghp_other"}, "", "--github-token-file: cannot read the file it names"},
		{"nothing", nil, nil, "", "pass --github-token-file FILE"},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f githubFlags
		f.define(fs, &serveFlags{getenv: func(k string) string { return c.vars[k] }})
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		o, err := f.options("token")
		if o.Token != c.want || (err == nil) != (c.error == "") || err != nil && !strings.Contains(err.Error(), c.error) {
			t.Errorf("%s: token %q, %v; want %q, %q", c.name, o.Token, err, c.want, c.error)
		}
		if err != nil && strings.Contains(err.Error(), "ghp_put_where") {
			t.Errorf("%s: the error shows the file's path: %v", c.name, err)
		}
	}
}
