package ec2_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

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

// machines is one page of DescribeInstances: each "ID:STATE".
func machines(entries ...string) [][]types.Instance {
	var page []types.Instance
	for _, e := range entries {
		id, state, _ := strings.Cut(e, ":")
		page = append(page, types.Instance{InstanceId: aws.String(id), State: &types.InstanceState{Name: types.InstanceStateName(state)}})
	}
	return [][]types.Instance{page}
}

// refusing fails a call on any of bad, naming the first as EC2 does.
func refusing(code, message string, bad ...string) func([]string) error {
	return func(ids []string) error {
		for _, id := range ids {
			if slices.Contains(bad, id) {
				return apiError(code, fmt.Sprintf(message, id))
			}
		}
		return nil
	}
}

const (
	protected  = "i-0000000000000aaa"
	terminated = "i-0000000000000bbb"
	stopping   = "i-0000000000000ccc"
)

// EC2 refuses a whole terminate over one machine an operator protects,
// naming it: the others are terminated all the same, and the protected one
// is reported as refused, not as gone, so that its row is not closed over
// a machine still running.
func TestOneProtectedMachineDoesNotHoldBackItsBatch(t *testing.T) {
	f := newFake()
	ids := batchIDs(domain.MaxBatch - 1)
	ids = append(ids[:10], append([]string{protected}, ids[10:]...)...)
	var done, asked [][]string
	refuse := refusing("OperationNotPermitted",
		"The instance '%s' may not be terminated. Modify its 'disableApiTermination' instance attribute and try again.", protected)
	f.terminate = func(ids []string) error {
		asked = append(asked, ids)
		if err := refuse(ids); err != nil {
			return err
		}
		done = append(done, ids)
		return nil
	}
	f.pages = machines(protected + ":running")
	err := newFakeCloud(t, f, ec2.Options{}).Terminate(t.Context(), ids)
	refused, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(refused.IDs, []string{protected}) || domain.TerminateDone(err) || codeOf(err) != "OperationNotPermitted" ||
		refused.Code != "OperationNotPermitted" || !strings.HasPrefix(refused.Reason, "The instance '"+protected+"' may not be terminated") {
		t.Fatalf("err %v; want the protected machine named as refused, and the terminate not done", err)
	}
	if len(done) != 1 || len(done[0]) != len(ids)-1 || slices.Contains(done[0], protected) {
		t.Fatalf("terminated %v; want the %d others in one call", done, len(ids)-1)
	}
	if len(asked) != 2 || !slices.Equal(asked[0], ids) {
		t.Fatalf("calls %v; want the refused one with every id as it was sent, then the one without it", asked)
	}
}

// EC2 refuses a whole start over one machine terminated behind bullpen's
// back, naming it: the others are started, and the terminated one, like
// one shutting down, is gone for the caller, as an unknown id is.
func TestAStartGoesOnWithoutMachinesThatAreGone(t *testing.T) {
	const shuttingDown = "i-0000000000000ddd"
	f := newFake()
	f.start = refusing("IncorrectInstanceState", "The instance '%s' is not in a state from which it can be started.",
		terminated, shuttingDown)
	f.pages = machines(terminated+":terminated", shuttingDown+":shutting-down", "i-00000000000000001:stopped")
	ids := append(batchIDs(3), terminated, shuttingDown)
	err := newFakeCloud(t, f, ec2.Options{}).Start(t.Context(), ids)
	if !errors.Is(err, domain.ErrUnknownInstance) || !slices.Equal(domain.UnknownIDs(err), []string{terminated, shuttingDown}) {
		t.Fatalf("err %v; want both gone machines named as unknown", err)
	}
	if last := f.started[len(f.started)-1]; len(f.started) != 1 || !slices.Equal(last, ids[:3]) {
		t.Fatalf("started %v; want the three others in one call", f.started)
	}
}

// A machine EC2 cannot start yet (it is still stopping) is not gone: it is
// reported as refused, and the others are started.
func TestAStartReportsAMachineItCannotStartYet(t *testing.T) {
	f := newFake()
	f.start = refusing("IncorrectInstanceState", "The instance '%s' is not in a state from which it can be started.", stopping, terminated)
	f.pages = machines(stopping+":stopping", terminated+":terminated")
	ids := append(batchIDs(2), stopping, terminated)
	err := newFakeCloud(t, f, ec2.Options{}).Start(t.Context(), ids)
	refused, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(refused.IDs, []string{stopping}) || !slices.Equal(refused.Unknown, []string{terminated}) ||
		errors.Is(err, domain.ErrUnknownInstance) {
		t.Fatalf("err %v; want the stopping machine refused and the terminated one named as gone", err)
	}
	if len(f.started) != 1 || !slices.Equal(f.started[0], ids[:2]) {
		t.Fatalf("started %v; want the two others", f.started)
	}
}

// A machine the call does not apply to (UnsupportedOperation, which EC2
// also uses for requests that can never work) is refused in EC2's words;
// the refusal does not read as an invalid request, which would reject the
// jobs waiting for the others.
func TestAnUnsupportedOperationOnOneMachineIsARefusal(t *testing.T) {
	f := newFake()
	f.start = refusing("UnsupportedOperation", "The instance '%s' does not support this operation.", stopping)
	f.pages = machines(stopping + ":stopped")
	ids := append(batchIDs(2), stopping)
	err := newFakeCloud(t, f, ec2.Options{}).Start(t.Context(), ids)
	refused, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(refused.IDs, []string{stopping}) || errors.Is(err, domain.ErrInvalidRequest) ||
		refused.Reason != "The instance '"+stopping+"' does not support this operation." {
		t.Fatalf("err %v; want the machine refused in EC2's words, not an invalid request", err)
	}
	if len(f.started) != 1 || !slices.Equal(f.started[0], ids[:2]) {
		t.Fatalf("started %v; want the two others", f.started)
	}
}

// A refusal that names no machine of the call is not about its machines:
// the call fails as it is, without another try.
func TestARefusalNamingNoMachineOfTheCallFailsIt(t *testing.T) {
	f := newFake()
	f.start = func([]string) error {
		return apiError("IncorrectInstanceState", "The instance 'i-0000000000000fff' is not in a state from which it can be started.")
	}
	err := newFakeCloud(t, f, ec2.Options{}).Start(t.Context(), batchIDs(2))
	if codeOf(err) != "IncorrectInstanceState" || f.calls["StartInstances"] != 1 || len(domain.UnknownIDs(err)) > 0 {
		t.Fatalf("%v after %d calls; want the refusal after one call", err, f.calls["StartInstances"])
	}
}

func codeOf(err error) string {
	if ce, ok := errors.AsType[*domain.CloudError](err); ok {
		return ce.Code
	}
	return ""
}
