package config

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that what it returns
// keeps its promises: a config or positioned, sorted errors, never both.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"../../examples/runs-on.yml", "../../examples/invalid.yml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(poolBase + "    schedule: [{name: n, match: {day: [friday], time: [\"22:00\", \"24:00\"]}}]\n"))
	f.Add([]byte("runners:\n  r: &r\n    image: u\n    <<: [*r, {cpu: [1, 2]}]\n"))
	f.Add([]byte("runners:\n  r: {image: i}\nimages:\n  i: {name: a/b, owner: self}\n  j: {ami: x}\n"))
	f.Add([]byte("a: [\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yml", data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("config %v and error %v", cfg, err)
		}
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range errs {
				if e.Line < 1 || e.Col < 1 || e.File != "fuzz.yml" || e.Msg == "" {
					t.Fatalf("badly positioned error %+v", e)
				}
			}
			if !slices.IsSortedFunc(errs, func(a, b Error) int { return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col)) }) {
				t.Fatalf("errors not sorted: %v", errs)
			}
			return
		}
		for _, p := range cfg.Pools {
			if _, ok := cfg.Runners[p.Runner]; !ok {
				t.Fatalf("pool %s refers to unknown runner %q", p.Name, p.Runner)
			}
			if p.Location == nil || p.HotIdleLifetime <= 0 {
				t.Fatalf("pool %s not filled in: %+v", p.Name, p)
			}
			for _, e := range p.Schedule {
				if e.Hot < 0 || e.Stopped < 0 {
					t.Fatalf("negative target in %+v", e)
				}
				if e.Match != nil && e.Match.Window != nil {
					w := e.Match.Window
					if w.Start < 0 || w.Start >= 1440 || w.End < 0 || w.End > 1440 || w.Start == w.End {
						t.Fatalf("bad window %+v", w)
					}
				}
			}
		}
	})
}
