package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// parser walks a yaml.v3 node tree and collects every problem it meets, so
// one pass reports them all. Each section is a list of fields (see fields);
// adding a key is adding a field.
type parser struct {
	file        string
	errs        Errors
	warnings    Errors
	runnerNames []string         // in file order, for "unknown runner" messages
	images      map[string]Image // the `images:` entries, which runners name by key
	autoscaleAt map[string]position
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	line, col := 1, 1
	if n != nil && n.Line > 0 {
		line, col = n.Line, n.Column
	}
	p.errs = append(p.errs, Error{File: p.file, Line: line, Col: col, Msg: msg})
}

// warnf records something worth telling the operator that does not make the
// file invalid.
func (p *parser) warnf(n *yaml.Node, path, format string, args ...any) {
	saved := p.errs
	p.errs = nil
	p.errorf(n, path, format, args...)
	p.warnings = append(p.warnings, p.errs...)
	p.errs = saved
}

// field is one known key of a mapping. parse receives the key's path and its
// value node, which may be null: each parser decides what null means.
type field struct {
	key      string
	required bool
	parse    func(path string, v *yaml.Node)
	// ignored marks a key another tool's files carry that bullpen accepts
	// but does not use: a warning, not an error, so existing files load.
	ignored bool
}

// fields checks that n is a mapping of known keys, hands each value to its
// field, and reports unknown, duplicate and missing keys. what names the
// mapping in messages ("schedule entry"); at is where a missing key is
// reported (the mapping's own key when it has one).
func (p *parser) fields(path, what string, at, n *yaml.Node, fs []field) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		p.errorf(n, path, "expected a mapping for the %s, got %s", what, describe(n))
		return
	}
	present := make(map[string]bool, len(fs))
	for _, kv := range p.pairs(path, what, n) {
		i := indexOf(fs, kv.key.Value)
		if i < 0 {
			p.errorf(kv.key, path, "unknown key %q in %s (known: %s)", kv.key.Value, what, knownKeys(fs))
			continue
		}
		present[fs[i].key] = true
		if fs[i].ignored {
			p.warnf(kv.key, path, "%q is a RunsOn setting bullpen does not use; ignored", kv.key.Value)
			continue
		}
		if fs[i].parse != nil {
			fs[i].parse(join(path, fs[i].key), kv.value)
		}
	}
	for _, f := range fs {
		if f.required && !present[f.key] {
			p.errorf(at, path, "missing required key %q in %s", f.key, what)
		}
	}
}

// entries calls each for every key of a user-named mapping (runners, pools,
// images). A null or absent section is empty.
func (p *parser) entries(path, what string, n *yaml.Node, each func(key, value *yaml.Node)) {
	n = deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "expected a mapping of %s, got %s", what, describe(n))
		return
	}
	for _, kv := range p.pairs(path, what, n) {
		each(kv.key, kv.value)
	}
}

type pair struct{ key, value *yaml.Node }

// pairs lists a mapping's key/value pairs in file order, reporting duplicate
// and non-scalar keys. YAML merge keys (<<) are expanded where they stand;
// as the merge spec says, explicit keys win over merged ones and earlier
// merges over later ones.
func (p *parser) pairs(path, what string, n *yaml.Node) []pair {
	explicit := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if isMerge(k) {
			continue
		}
		if k == nil || k.Kind != yaml.ScalarNode {
			p.errorf(k, path, "keys in %s must be strings, got %s", what, describe(k))
			continue
		}
		if first, dup := explicit[k.Value]; dup {
			p.errorf(k, path, "duplicate key %q in %s (first at line %d)", k.Value, what, first.Line)
			continue
		}
		explicit[k.Value] = k
	}
	seen := make(map[string]bool, len(explicit))
	visited := map[*yaml.Node]bool{n: true}
	var out []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		switch {
		case isMerge(k):
			out = p.merge(path, v, explicit, seen, visited, out)
		case k != nil && explicit[k.Value] == k:
			seen[k.Value] = true
			out = append(out, pair{k, v})
		}
	}
	return out
}

// merge appends the pairs of a merge value (a mapping or a list of
// mappings) whose keys are not already taken. visited stops alias cycles
// and keeps the expansion linear in the size of the document.
func (p *parser) merge(path string, v *yaml.Node, explicit map[string]*yaml.Node, seen map[string]bool, visited map[*yaml.Node]bool, out []pair) []pair {
	v = deref(v)
	switch {
	case v == nil:
	case v.Kind == yaml.SequenceNode:
		for _, m := range v.Content {
			if m = deref(m); m == nil || m.Kind != yaml.MappingNode {
				p.errorf(m, path, "merge (<<) list items must be mappings, got %s", describe(m))
				continue
			}
			out = p.merge(path, m, explicit, seen, visited, out)
		}
		return out
	case v.Kind == yaml.MappingNode:
		if visited[v] {
			return out
		}
		visited[v] = true
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := deref(v.Content[i])
			switch {
			case isMerge(k):
				out = p.merge(path, v.Content[i+1], explicit, seen, visited, out)
			case k == nil || k.Kind != yaml.ScalarNode || seen[k.Value] || explicit[k.Value] != nil:
			default:
				seen[k.Value] = true
				out = append(out, pair{k, v.Content[i+1]})
			}
		}
		return out
	}
	p.errorf(v, path, "merge (<<) value must be a mapping or a list of mappings, got %s", describe(v))
	return out
}
