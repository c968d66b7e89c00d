package main

import (
	"strings"
	"testing"
)

func TestViewerToken(t *testing.T) {
	file := writeFile(t, t.TempDir(), "viewer", " viewer-from-file-0\n")
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "BULLPEN_VIEWER_TOKEN" {
				return v
			}
			return ""
		}
	}
	cases := []struct {
		name string
		f    serveFlags
		want string
		err  string
	}{
		{"none", serveFlags{getenv: env("")}, "", ""},
		{"environment", serveFlags{getenv: env("viewer-from-env-0")}, "viewer-from-env-0", ""},
		{"flag over environment", serveFlags{viewer: "viewer-from-flag-0", getenv: env("viewer-from-env-0")}, "viewer-from-flag-0", ""},
		{"file over environment", serveFlags{viewerFile: file, getenv: env("viewer-from-env-0")}, "viewer-from-file-0", ""},
		{"missing file", serveFlags{viewerFile: file + ".nope", getenv: env("")}, "", "--viewer-token-file: cannot read the file it names"},
		{"the admin token", serveFlags{viewer: "admin-secret", getenv: env("")}, "", "the viewer token is the admin token"},
		{"too short to key sessions", serveFlags{viewer: "viewer1", getenv: env("")}, "viewer1", "the viewer token is 7 characters: want at least 16"},
	}
	for _, c := range cases {
		got, err := c.f.viewerToken("admin-secret")
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "admin-secret") {
			t.Errorf("%s: the message carries the token", c.name)
		}
	}
}
