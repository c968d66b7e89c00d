package agents

import (
	"fmt"
	"testing"
)

func TestIDCacheIsBounded(t *testing.T) {
	var c idCache
	for i := range maxCachedIDs + 10 {
		c.put(fmt.Sprintf("i-%d", i), fmt.Sprintf("bp-%d", i))
	}
	if n := len(c.m); n > maxCachedIDs {
		t.Fatalf("cache holds %d entries, bound is %d", n, maxCachedIDs)
	}
	last := fmt.Sprintf("i-%d", maxCachedIDs+9)
	if id, ok := c.get(last); !ok || id != fmt.Sprintf("bp-%d", maxCachedIDs+9) {
		t.Fatalf("latest entry: %q %v", id, ok)
	}
}
