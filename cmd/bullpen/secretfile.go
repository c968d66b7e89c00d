package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// secretSetting is a secret given as --FLAG, --FLAG-file, $ENV or
// $ENV_FILE. The file settings take their variable after parsing, never
// as a flag default: -h and every flag error print defaults, and an
// operator who put the secret itself in the variable would see it there.
// For the same reason no message shows a file setting's value.
type secretSetting struct {
	what string // "admin token"
	flag string // "admin-token"; the file flag is flag+"-file"
	env  string // "BULLPEN_ADMIN_TOKEN"; the file variable is env+"_FILE"
}

var (
	webhookSecret = secretSetting{"webhook secret", "webhook-secret", "BULLPEN_WEBHOOK_SECRET"}
	adminToken    = secretSetting{"admin token", "admin-token", "BULLPEN_ADMIN_TOKEN"}
	viewerToken   = secretSetting{"viewer token", "viewer-token", "BULLPEN_VIEWER_TOKEN"}
	githubAppKey  = secretSetting{"GitHub App's private key (PEM)", "github-app-key", "BULLPEN_GITHUB_APP_KEY"}
	githubToken   = secretSetting{"GitHub token", "github-token", "BULLPEN_GITHUB_TOKEN"}
)

// defineFile defines the --FLAG-file flag, without a default.
func (s secretSetting) defineFile(fs *flag.FlagSet, p *string, usage string) {
	fs.StringVar(p, s.flag+"-file", "", usage+" ($"+s.env+"_FILE)")
}

// resolve returns the secret. Flags win over variables, and of each a
// file over a value: --FLAG-file, --FLAG, $ENV_FILE, $ENV. It is "" when
// nothing gives one. Spaces and line ends around a value are dropped, as
// around a file's: a Kubernetes secret or an echo into a variable often
// ends in a newline, and kept, every webhook would fail its signature
// check with nothing to say why.
func (s secretSetting) resolve(getenv func(string) string, value, file string) (string, error) {
	if value = strings.TrimSpace(value); file == "" && value != "" {
		return value, nil
	}
	if v, given, err := s.fromFile(getenv, file); given || err != nil {
		return v, err
	}
	if getenv == nil {
		return "", nil
	}
	return strings.TrimSpace(getenv(s.env)), nil
}

// fromFile reads the secret from the file named by file (the flag) or
// else $ENV_FILE, and reports whether either named one. A file that cannot
// be read or holds nothing is an error naming the setting.
func (s secretSetting) fromFile(getenv func(string) string, file string) (string, bool, error) {
	from := "--" + s.flag + "-file"
	if file == "" && getenv != nil {
		if file = getenv(s.env + "_FILE"); file != "" {
			from = "$" + s.env + "_FILE"
		}
	}
	if file == "" {
		return "", false, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // its message holds the path, which may be the secret itself
		}
		return "", true, fmt.Errorf("%s: cannot read the file it names: %w (it takes the path of a file holding the %s; the path is not shown, in case the %s itself was put there)", from, err, s.what, s.what)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", true, fmt.Errorf("%s names an empty file: it should hold the %s", from, s.what)
	}
	return v, true, nil
}

// missing is the error of a secret that serve needs and nothing gave.
func (s secretSetting) missing() error {
	return fmt.Errorf("no %s: set $%s, or pass --%s-file FILE", s.what, s.env, s.flag)
}

// MinTokenLength is the shortest admin or viewer token serve takes. The
// tokens key the dashboard's session cookies: anyone holding a cookie (a
// viewer, a proxy's log) can test guesses of a short token offline at
// millions a second, then sign an admin session.
const MinTokenLength = 16

// strong refuses a token shorter than MinTokenLength, naming the setting,
// never the value.
func (s secretSetting) strong(v string) error {
	if v == "" || len(v) >= MinTokenLength {
		return nil
	}
	return fmt.Errorf("the %s is %d characters: want at least %d, hard to guess (e.g. `openssl rand -hex 32`), since a short one can be found offline from a dashboard session",
		s.what, len(v), MinTokenLength)
}
