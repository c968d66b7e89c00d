package ec2like_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestCallsCountsCallsAndIDs(t *testing.T) {
	var c ec2like.Calls
	ctx := context.Background()
	for _, n := range []int{3, 7, 1} {
		if err := c.Begin(ctx, ec2like.OpStopInstances, n); err != nil {
			t.Fatal(err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Begin(cancelled, ec2like.OpStopInstances, 50); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	counts, maxIDs := c.Counts(), c.MaxIDs()
	if !maps.Equal(counts, map[string]int{ec2like.OpStopInstances: 3}) {
		t.Errorf("counts %v", counts)
	}
	if !maps.Equal(maxIDs, map[string]int{ec2like.OpStopInstances: 7}) {
		t.Errorf("max ids %v", maxIDs)
	}
	counts[ec2like.OpStopInstances] = 99
	if c.Counts()[ec2like.OpStopInstances] != 3 {
		t.Error("Counts handed out its own map")
	}
	c.Reset()
	if len(c.Counts()) != 0 || len(c.MaxIDs()) != 0 || c.Counts() == nil {
		t.Errorf("after Reset: %v %v", c.Counts(), c.MaxIDs())
	}
}

func TestLedgerReplaysByToken(t *testing.T) {
	var l ec2like.Ledger
	spec := domain.LaunchSpec{Count: 2, ImageID: "ami-1", Tags: map[string]string{"k": "v"}, ClientToken: "t"}
	fp := ec2like.Fingerprint(spec)
	if got, err := l.Recall("t", fp); got != nil || err != nil {
		t.Fatalf("empty ledger: %v, %v", got, err)
	}
	short := errors.New("short")
	l.Remember("t", fp, []string{"i-1"}, short)
	l.Remember("none", fp, nil, nil)         // launched nothing
	l.Remember("", fp, []string{"i-2"}, nil) // no token
	got, err := l.Recall("t", fp)
	if err != nil || got == nil || len(got.IDs) != 1 || got.IDs[0] != "i-1" || got.Err != short {
		t.Errorf("recall: %+v, %v", got, err)
	}
	for _, token := range []string{"none", ""} {
		if got, err := l.Recall(token, fp); got != nil || err != nil {
			t.Errorf("token %q remembered: %+v, %v", token, got, err)
		}
	}
	other := spec
	other.Count = 3
	_, err = l.Recall("t", ec2like.Fingerprint(other))
	checkCode(t, err, ec2like.OpCreateFleet, ec2like.CodeIdempotentMismatch)
}

func TestFingerprintTellsRequestsApart(t *testing.T) {
	base := domain.LaunchSpec{Count: 2, ImageID: "ami-1", Tags: map[string]string{"k": "v"}, ClientToken: "t"}
	base.Agent.LaunchID = "l1"
	same := base
	same.ClientToken = "other" // the token is not part of the request
	same.Tags = map[string]string{"k": "v"}
	if ec2like.Fingerprint(base, "m7a.large") != ec2like.Fingerprint(same, "m7a.large") {
		t.Error("equal requests differ")
	}
	variants := []func(*domain.LaunchSpec){
		func(s *domain.LaunchSpec) { s.Count = 3 },
		func(s *domain.LaunchSpec) { s.ImageID = "ami-2" },
		func(s *domain.LaunchSpec) { s.Tags = map[string]string{"k": "w"} },
		func(s *domain.LaunchSpec) { s.Agent.LaunchID = "l2" },
	}
	for i, change := range variants {
		s := base
		change(&s)
		if ec2like.Fingerprint(s, "m7a.large") == ec2like.Fingerprint(base, "m7a.large") {
			t.Errorf("variant %d has the same fingerprint", i)
		}
	}
	if ec2like.Fingerprint(base, "m7a.large") == ec2like.Fingerprint(base, "m7a.xlarge") {
		t.Error("extra fields are ignored")
	}
}

func TestCheckLaunch(t *testing.T) {
	tests := []struct {
		count int
		image string
		code  string
	}{
		{1, "ami-1", ""},
		{5, "ami-1", ""},
		{0, "ami-1", ec2like.CodeInvalidParameter},
		{6, "ami-1", ec2like.CodeInvalidParameter},
		{1, "", ec2like.CodeAMIMalformed},
	}
	for _, tt := range tests {
		err := ec2like.CheckLaunch(domain.LaunchSpec{Count: tt.count, ImageID: tt.image}, 5)
		checkCode(t, err, ec2like.OpCreateFleet, tt.code)
	}
	checkCode(t, ec2like.RequireImageName(""), ec2like.OpDescribeImages, ec2like.CodeAMINotFound)
	if !errors.Is(ec2like.RequireImageName(""), domain.ErrUnknownImage) {
		t.Error("an empty image name is not ErrUnknownImage")
	}
	checkCode(t, ec2like.RequireImageName("x"), ec2like.OpDescribeImages, "")
}

func TestFit(t *testing.T) {
	tests := []struct{ want, capacity, live, fit int }{
		{5, 0, 100, 5}, // no cap
		{5, 10, 3, 5},
		{5, 10, 7, 3},
		{5, 10, 10, 0},
		{5, 10, 12, 0}, // lowered below what runs
	}
	for _, tt := range tests {
		if got := ec2like.Fit(tt.want, tt.capacity, tt.live); got != tt.fit {
			t.Errorf("Fit(%d, %d, %d) = %d, want %d", tt.want, tt.capacity, tt.live, got, tt.fit)
		}
	}
}
