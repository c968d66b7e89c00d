package domain_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A refusal names machines that exist: a terminate that left them is not
// done, and its message says which and why.
func TestARefusedTerminateIsNotDone(t *testing.T) {
	err := &domain.CloudError{Op: "TerminateInstances", Code: "OperationNotPermitted", Err: &domain.RefusedInstancesError{
		Op: "TerminateInstances", Code: "OperationNotPermitted", IDs: []string{"i-1", "i-2"}, Unknown: []string{"i-9"},
		Reason: "may not be terminated"}}
	if domain.TerminateDone(err) || errors.Is(err, domain.ErrUnknownInstance) {
		t.Fatalf("%v reads as done", err)
	}
	for _, want := range []string{"i-1, i-2", "may not be terminated", "unknown instances i-9"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err.Error(), want)
		}
	}
	if got := domain.RefusedIDs(err); !slices.Equal(got, []string{"i-1", "i-2"}) {
		t.Errorf("refused ids %v", got)
	}
	if got := domain.UnknownIDs(err); !slices.Equal(got, []string{"i-9"}) {
		t.Errorf("unknown ids %v", got)
	}
}

func TestNotActedOnNamesWhatABatchLeft(t *testing.T) {
	refused := &domain.RefusedInstancesError{Op: "StartInstances", IDs: []string{"i-1"}, Unknown: []string{"i-2"}}
	for _, tc := range []struct {
		name  string
		err   error
		ids   []string
		named bool
	}{
		{"done", nil, nil, true},
		{"unknown", &domain.UnknownInstancesError{Op: "StartInstances", IDs: []string{"i-2"}}, []string{"i-2"}, true},
		{"refused and unknown", &domain.CloudError{Op: "StartInstances", Code: "IncorrectInstanceState", Err: refused},
			[]string{"i-1", "i-2"}, true},
		{"whole call", &domain.CloudError{Op: "StartInstances", Code: "InternalError", Err: errors.New("boom")}, nil, false},
	} {
		ids, named := domain.NotActedOn(tc.err)
		if !slices.Equal(ids, tc.ids) || named != tc.named {
			t.Errorf("%s: %v, %t; want %v, %t", tc.name, ids, named, tc.ids, tc.named)
		}
	}
}
