package local

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Keys of a machine's env file, read by `bullpen agent --config`.
const (
	EnvURL       = "BULLPEN_AGENT_URL"       // the control plane's base URL
	EnvLaunch    = "BULLPEN_AGENT_LAUNCH_ID" // the launch id
	EnvBootstrap = "BULLPEN_AGENT_BOOTSTRAP" // the machine's own bootstrap secret
	EnvCloudID   = "BULLPEN_AGENT_CLOUD_ID"  // the machine's cloud id
	EnvStateDir  = "BULLPEN_AGENT_STATE_DIR" // where the agent keeps its token
)

// renderEnv renders the launch data as KEY=value lines that a POSIX shell
// can source and a line-based reader can parse: the bootstrap fields first,
// then extra in key order. A value of letters, digits and _@%+=:,./- is
// written as it is; any other is single-quoted, an embedded quote written
// as '\”. Line breaks and NUL cannot be carried by a line-based file and
// are refused; the error names the key, never the value.
func renderEnv(b domain.AgentBootstrap, extra map[string]string) (string, error) {
	var sb strings.Builder
	add := func(k, v string) error {
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("env file: the value of %s holds a line break or NUL", k)
		}
		sb.WriteString(k)
		sb.WriteByte('=')
		sb.WriteString(quoteEnv(v))
		sb.WriteByte('\n')
		return nil
	}
	for _, kv := range [][2]string{{EnvURL, b.URL}, {EnvLaunch, b.LaunchID}, {EnvBootstrap, b.Secret}} {
		if err := add(kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := add(k, extra[k]); err != nil {
			return "", err
		}
	}
	return sb.String(), nil
}

func quoteEnv(v string) string {
	if strings.Trim(v, envSafe) == "" {
		return v // the empty value too
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

const envSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-"

// writeEnvFile writes the env file readable by its owner only: it holds the
// bootstrap secret.
func writeEnvFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
