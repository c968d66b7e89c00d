package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// str reads a non-empty string. Numbers are taken as written, so that
// `environment: 2024` means "2024"; booleans and null are refused.
func (p *parser) str(path string, n *yaml.Node) (string, bool) {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float":
			if n.Value != "" {
				return n.Value, true
			}
		}
	}
	p.errorf(n, path, "expected a non-empty string, got %s", describe(n))
	return "", false
}

func (p *parser) integer(path string, n *yaml.Node) (int, bool) {
	return decodeScalar[int](p, path, n, "!!int", "an integer")
}

// count reads an integer >= 0; key names it in the message.
func (p *parser) count(path, key string, n *yaml.Node) int {
	v, ok := p.integer(path, n)
	if ok && v < 0 {
		p.errorf(deref(n), path, "%s must be >= 0, got %d", key, v)
		return 0
	}
	return v
}

// MaxPoolSize bounds a schedule entry's hot and stopped counts: far above
// what an account's instance quotas allow, so a larger number is a typo,
// and one the converger would otherwise start creating rows for.
const MaxPoolSize = 10_000

// poolSize reads a count of a pool's instances, at most MaxPoolSize.
func (p *parser) poolSize(path, key string, n *yaml.Node) int {
	v := p.count(path, key, n)
	if v > MaxPoolSize {
		p.errorf(deref(n), path, "%s must be at most %d, got %d", key, MaxPoolSize, v)
		return 0
	}
	return v
}

func (p *parser) boolean(path string, n *yaml.Node) (bool, bool) {
	return decodeScalar[bool](p, path, n, "!!bool", "true or false")
}

// decodeScalar reads n, a scalar tagged tag, as a T, and reports anything
// else as not being what want names.
func decodeScalar[T any](p *parser, path string, n *yaml.Node, tag, want string) (T, bool) {
	n = deref(n)
	var v T
	if isScalar(n, tag) && n.Decode(&v) == nil {
		return v, true
	}
	p.errorf(n, path, "expected %s, got %s", want, describe(n))
	var zero T
	return zero, false
}

func (p *parser) duration(path string, n *yaml.Node) (time.Duration, bool) {
	s, ok := p.str(path, n)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errorf(deref(n), path, "bad duration %q (expected a Go duration such as 10m or 1h30m)", s)
		return 0, false
	}
	return d, true
}

// checkName reports names that could not be written in a job label such as
// runs-on=123/pool=NAME.
func (p *parser) checkName(path, what string, k *yaml.Node) {
	if k.Value == "" || strings.ContainsAny(k.Value, " \t\r\n/=,") {
		p.errorf(k, path, "bad %s name %q (names may not be empty or contain spaces, \"/\", \"=\" or \",\")", what, k.Value)
	}
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// isScalar reports whether n is a scalar tagged tag ("!!str", "!!int", …).
func isScalar(n *yaml.Node, tag string) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == tag
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || isScalar(n, "!!null")
}

func isMerge(k *yaml.Node) bool { return isScalar(k, "!!merge") }

// describe names what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind != yaml.ScalarNode:
		return "an alias"
	case n.ShortTag() == "!!str":
		if r := []rune(n.Value); len(r) > 40 {
			return strconv.Quote(string(r[:40]) + "…")
		}
		return strconv.Quote(n.Value)
	}
	return n.Value
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func indexOf(fs []field, key string) int {
	for i, f := range fs {
		if f.key == key {
			return i
		}
	}
	return -1
}

func knownKeys(fs []field) string {
	var keys []string
	for _, f := range fs {
		if !f.ignored {
			keys = append(keys, f.key)
		}
	}
	return strings.Join(keys, ", ")
}
