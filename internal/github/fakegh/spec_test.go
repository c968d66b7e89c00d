package fakegh_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// descriptions are GitHub.com's OpenAPI description and, for the
// enterprise routes it leaves out, GitHub Enterprise Cloud's.
type descriptions struct{ dotcom, ghec map[string]any }

// loadSpecs reads both descriptions, or returns nil when they are not
// installed.
func loadSpecs(t *testing.T) *descriptions {
	t.Helper()
	d := &descriptions{dotcom: loadSpec(t, specPath), ghec: loadSpec(t, ghecSpecPath)}
	if d.dotcom == nil || d.ghec == nil {
		return nil
	}
	return d
}

// of is the description that holds e's operation.
func (d *descriptions) of(e endpoint) map[string]any {
	if strings.HasPrefix(e.route, "/enterprises/") {
		return d.ghec
	}
	return d.dotcom
}

// loadSpec reads an OpenAPI description, or returns nil when it is not
// installed.
func loadSpec(t *testing.T, specPath string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("read OpenAPI description: %v", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("parse OpenAPI description: %v", err)
	}
	return spec
}

// specShapes flattens the example of each endpoint's answer.
func specShapes(t *testing.T, specs *descriptions, endpoints []endpoint) map[string][]shapeLine {
	t.Helper()
	out := map[string][]shapeLine{}
	for _, e := range endpoints {
		spec := specs.of(e)
		examples, _ := dig(spec, responseOf(spec, e), "content", "application/json", "examples").(map[string]any)
		names := make([]string, 0, len(examples))
		for name := range examples {
			names = append(names, name)
		}
		slices.Sort(names)
		if len(names) == 0 {
			t.Fatalf("the OpenAPI description has no example for %s", e.key())
		}
		if slices.Contains(names, "default") {
			names[0] = "default"
		}
		var lines []shapeLine
		flatten(dig(spec, examples[names[0]], "value"), "", &lines)
		out[e.key()] = lines
	}
	return out
}

func responseOf(spec map[string]any, e endpoint) any {
	return dig(spec, spec, "paths", e.route, strings.ToLower(e.method), "responses", e.status)
}

// dig follows keys from v, resolving $refs on the way.
func dig(spec map[string]any, v any, keys ...string) any {
	v = resolve(spec, v)
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = resolve(spec, m[k])
	}
	return v
}

// resolve follows a {"$ref": "#/..."} to what it points at.
func resolve(spec map[string]any, v any) any {
	for range 32 {
		m, ok := v.(map[string]any)
		ref, isRef := m["$ref"].(string)
		if !ok || !isRef {
			return v
		}
		var cur any = spec
		for _, seg := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
			cm, _ := cur.(map[string]any)
			cur = cm[seg]
		}
		v = cur
	}
	return v
}

// checkRequired reports fields the answer's schema requires that the body
// lacks, and fields the body has that the schema does not know, at any
// depth.
func checkRequired(spec map[string]any, e endpoint, body []byte) []string {
	schema := dig(spec, responseOf(spec, e), "content", "application/json", "schema")
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	requireFields(spec, schema, v, "", e.ignore, &problems, 0)
	return problems
}

func requireFields(spec map[string]any, schema, v any, at string, ignore []string, problems *[]string, depth int) {
	s, _ := resolve(spec, schema).(map[string]any)
	if v == nil || s == nil || depth > 16 {
		return
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			requireFields(spec, sub, v, at, ignore, problems, depth+1)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		req, _ := s["required"].([]any)
		for _, r := range req {
			name, _ := r.(string)
			path := strings.TrimPrefix(at+"."+name, ".")
			if _, ok := x[name]; !ok && !slices.ContainsFunc(ignore, func(p string) bool { return strings.HasPrefix(path, p) }) {
				*problems = append(*problems, fmt.Sprintf("%s: required by the schema, missing", path))
			}
		}
		props, _ := s["properties"].(map[string]any)
		for name, sub := range props {
			if xv, ok := x[name]; ok {
				requireFields(spec, sub, xv, strings.TrimPrefix(at+"."+name, "."), ignore, problems, depth+1)
			}
		}
		_, composed := s["allOf"]
		_, open := s["additionalProperties"].(map[string]any) // any key, of that schema
		if len(props) > 0 && !composed && !open {
			for name := range x {
				if _, ok := props[name]; !ok {
					*problems = append(*problems, fmt.Sprintf("%s: not a field of the schema", strings.TrimPrefix(at+"."+name, ".")))
				}
			}
		}
	case []any:
		for i, e := range x {
			requireFields(spec, s["items"], e, fmt.Sprintf("%s[%d]", at, i), ignore, problems, depth+1)
		}
	}
}

// appKeyAndJWT makes a GitHub App key and a JWT for the app, as an App's
// backend signs one to ask for installation tokens.
func appKeyAndJWT(t *testing.T, appID int64) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key, signJWT(t, key, appID, time.Now().Add(9*time.Minute))
}

func signJWT(t *testing.T, key *rsa.PrivateKey, appID int64, exp time.Time) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iss": strconv.FormatInt(appID, 10), "iat": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix()})
	signing := enc(header) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc(sig)
}
