package appplatform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// An app spec is kept as the JSON values DigitalOcean sent (objects as
// map[string]any, numbers as json.Number), not as godo.AppSpec: writing
// back a typed spec would drop every field this version of godo does not
// model, and explicit zero values its omitempty tags skip. Only the
// worker's instance_count is ever changed.

// decodeSpec reads a spec, numbers kept exact.
func decodeSpec(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("decode app spec: %w", err)
	}
	if spec == nil {
		return nil, fmt.Errorf("decode app spec: the app has no spec")
	}
	return spec, nil
}

// cloneSpec copies a spec deeply.
func cloneSpec(spec map[string]any) (map[string]any, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("copy app spec: %w", err)
	}
	return decodeSpec(b)
}

// worker finds the worker component named name in the spec.
func worker(spec map[string]any, name string) (map[string]any, error) {
	list, _ := spec["workers"].([]any)
	names := make([]string, 0, len(list))
	for _, w := range list {
		m, ok := w.(map[string]any)
		if !ok {
			continue
		}
		n, _ := m["name"].(string)
		if n == name {
			return m, nil
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("worker %q: %w (the app has no workers; set WORKER_NAME to the worker component running the runners)", name, ErrWorkerNotFound)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("worker %q: %w (the app's workers are %q; set WORKER_NAME)", name, ErrWorkerNotFound, names)
}

// WorkerCount is the instance_count of the worker named name: 1 when the
// spec leaves it out, App Platform's default. A worker with App Platform
// autoscaling is refused (ErrWorkerAutoscaled): its instance_count means
// nothing.
func WorkerCount(spec map[string]any, name string) (int, error) {
	w, err := worker(spec, name)
	if err != nil {
		return 0, err
	}
	if a, ok := w["autoscaling"]; ok && a != nil {
		return 0, fmt.Errorf("worker %q: %w: remove its autoscaling block, or do not run this autoscaler", name, ErrWorkerAutoscaled)
	}
	raw, ok := w["instance_count"]
	if !ok || raw == nil {
		return 1, nil
	}
	n, ok := wholeNumber(raw)
	if !ok {
		return 0, fmt.Errorf("worker %q: instance_count %v is not a whole number", name, raw)
	}
	return n, nil
}

func wholeNumber(v any) (int, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return int(n), err == nil
	case float64:
		return int(x), x == math.Trunc(x)
	case int:
		return x, true
	case int64:
		return int(x), true
	}
	return 0, false
}

// withWorkerCount is a copy of spec with the worker's instance_count set to
// n and nothing else changed.
func withWorkerCount(spec map[string]any, name string, n int) (map[string]any, error) {
	if _, err := WorkerCount(spec, name); err != nil {
		return nil, err
	}
	out, err := cloneSpec(spec)
	if err != nil {
		return nil, err
	}
	w, err := worker(out, name)
	if err != nil {
		return nil, err
	}
	w["instance_count"] = json.Number(strconv.Itoa(n))
	return out, nil
}

// changedKeys lists the top-level spec fields that differ between a and b,
// for a log line saying what moved under us.
func changedKeys(a, b map[string]any) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || canonicalValue(v) != canonicalValue(w) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func canonicalValue(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
