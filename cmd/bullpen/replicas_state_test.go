package main

import (
	"path/filepath"
	"testing"
)

// sharedState returns the flags that put both replicas on one store.
func sharedState(t *testing.T, bin, run, endpoint string) []string {
	return []string{"--store", "sqlite://" + filepath.Join(t.TempDir(), "shared.db")}
}
