package ec2_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func batchIDs(n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("i-0%016x", i))
	}
	return ids
}

// A throttled check before tagging fails the tag at once: describing each
// id on its own would make one throttled call fifty more.
func TestATagWhoseCheckIsThrottledFailsAtOnce(t *testing.T) {
	f := newFake()
	f.describe = func([]string) error { return apiError("RequestLimitExceeded", "Request limit exceeded.") }
	err := newFakeCloud(t, f, ec2.Options{}).Tag(t.Context(), batchIDs(domain.MaxBatch), map[string]string{domain.TagPool: "p"})
	if !errors.Is(err, domain.ErrThrottled) || f.calls["DescribeInstances"] != 1 || f.calls["CreateTags"] != 0 {
		t.Fatalf("%v after %d describes and %d tags; want throttled after one describe and no tag",
			err, f.calls["DescribeInstances"], f.calls["CreateTags"])
	}
}

// An id EC2 refuses as malformed without naming it is found by describing
// each id on its own; the others are tagged.
func TestATagFindsAMalformedIDOneByOne(t *testing.T) {
	f := newFake()
	ids := append(batchIDs(3), "i-bad")
	f.describe = func(in []string) error {
		if slices.Contains(in, "i-bad") {
			return apiError("InvalidInstanceID.Malformed", "Invalid id: \"i-bad\"")
		}
		return nil
	}
	err := newFakeCloud(t, f, ec2.Options{}).Tag(t.Context(), ids, map[string]string{domain.TagPool: "p"})
	if !slices.Equal(domain.UnknownIDs(err), []string{"i-bad"}) || len(f.tagged) != 1 || !slices.Equal(f.tagged[0], ids[:3]) {
		t.Fatalf("%v, tagged %v; want i-bad named and the three others tagged", err, f.tagged)
	}
}
