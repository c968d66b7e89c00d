package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// checkParams refuses a query parameter the endpoint does not know (a
// misspelt filter would otherwise answer everything, unfiltered) and one
// of single given more than once (all but the first would be ignored);
// each of lists takes several values.
func checkParams(r *http.Request, single, lists []string) error {
	for key, vs := range r.URL.Query() {
		switch {
		case slices.Contains(lists, key): // an empty one filters nothing, as a form's empty field
		case !slices.Contains(single, key):
			known := slices.Sorted(slices.Values(append(slices.Clone(single), lists...)))
			if len(known) == 0 {
				return fmt.Errorf("unknown parameter %q: this list takes none", key)
			}
			return fmt.Errorf("unknown parameter %q (known: %s)", key, strings.Join(known, ", "))
		case len(vs) > 1:
			return fmt.Errorf("parameter %q given %d times; it takes one value", key, len(vs))
		}
	}
	return nil
}

func limitParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > MaxLimit {
		return 0, fmt.Errorf("bad limit %q: want 1..%d", v, MaxLimit)
	}
	return n, nil
}

// boolParam reads a flag: absent is false, present without a value true.
func boolParam(r *http.Request, key string) (bool, error) {
	q := r.URL.Query()
	if !q.Has(key) {
		return false, nil
	}
	v := q.Get(key)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("bad %s %q: want true or false (1 or 0)", key, v)
	}
	return b, nil
}

func splitParam(r *http.Request, key string) []string {
	var out []string
	for _, v := range r.URL.Query()[key] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// namesParam reads a list parameter of job statuses or instance states,
// refusing an unknown one with the names the endpoint knows.
func namesParam[T interface {
	~string
	Valid() bool
}](r *http.Request, key string, known []T) ([]T, error) {
	var out []T
	for _, v := range splitParam(r, key) {
		if !T(v).Valid() {
			names := make([]string, len(known))
			for i, k := range known {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("unknown %s %q (known: %s)", key, v, strings.Join(names, ", "))
		}
		out = append(out, T(v))
	}
	return out, nil
}
