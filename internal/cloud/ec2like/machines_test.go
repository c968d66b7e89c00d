package ec2like_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func view(b *box) domain.CloudInstance { return ec2like.Snapshot(b.inst) }

func TestDescribeSelects(t *testing.T) {
	all := fleet(domain.CloudRunning, domain.CloudTerminated, domain.CloudStopped, domain.CloudPending)
	all["c"].inst.Tags["pool"] = "x"
	all["b"].inst.Tags["pool"] = "x"
	tests := []struct {
		name     string
		filter   domain.CloudFilter
		want     []string
		wantCode string
	}{
		{"everything live in creation order", domain.CloudFilter{}, []string{"a", "c", "d"}, ""},
		{"by tag, live only", domain.CloudFilter{Tags: map[string]string{"pool": "x"}}, []string{"c"}, ""},
		{"by ids, terminated too, in creation order", domain.CloudFilter{IDs: []string{"d", "b", "a"}}, []string{"a", "b", "d"}, ""},
		{"by ids and tag", domain.CloudFilter{IDs: []string{"a", "b"}, Tags: map[string]string{"pool": "x"}}, []string{"b"}, ""},
		{"tag value must match", domain.CloudFilter{Tags: map[string]string{"pool": "y"}}, nil, ""},
		{"an unknown id fails", domain.CloudFilter{IDs: []string{"a", "zz"}}, nil, ec2like.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ec2like.Describe(tt.filter, all, lookupIn(all, 10), view)
			checkCode(t, err, ec2like.OpDescribeInstances, tt.wantCode)
			var gotIDs []string
			for _, inst := range got {
				gotIDs = append(gotIDs, inst.ID)
			}
			if !slices.Equal(gotIDs, tt.want) {
				t.Errorf("described %v, want %v", gotIDs, tt.want)
			}
		})
	}
}

func TestViewsDescribesWhatIsLeft(t *testing.T) {
	all := fleet(domain.CloudRunning, domain.CloudRunning, domain.CloudRunning)
	delete(all, "b")
	got := ec2like.Views(all, []string{"c", "b", "a"}, view)
	if len(got) != 2 || got[0].ID != "c" || got[1].ID != "a" {
		t.Errorf("views %+v, want c and a", got)
	}
	if got := ec2like.Views(all, []string{"b"}, view); got == nil || len(got) != 0 {
		t.Errorf("views of gone machines %#v, want an empty list", got)
	}
}

func TestAddTags(t *testing.T) {
	all := fleet(domain.CloudRunning, domain.CloudStopped)
	ms, err := ec2like.AddTags([]string{"b", "a"}, map[string]string{"name": "n", "k": "v"}, lookupIn(all, 10))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ms); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("changed %v", got)
	}
	for _, id := range []string{"a", "b"} {
		if want := map[string]string{"name": "n", "k": "v"}; !maps.Equal(all[id].inst.Tags, want) {
			t.Errorf("%s tags %v, want %v", id, all[id].inst.Tags, want)
		}
	}
	for _, tc := range []struct {
		ids  []string
		tags map[string]string
		code string
	}{
		{[]string{"a"}, nil, ec2like.CodeMissingParameter},
		{[]string{"a", "zz"}, map[string]string{"k": "w"}, ec2like.CodeNotFound},
	} {
		ms, err := ec2like.AddTags(tc.ids, tc.tags, lookupIn(all, 10))
		checkCode(t, err, ec2like.OpCreateTags, tc.code)
		if ms != nil || all["a"].inst.Tags["k"] != "v" {
			t.Errorf("refused call changed %v, tags of a %v", ids(ms), all["a"].inst.Tags)
		}
	}
}

func TestSortedLiveAndPurge(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	all := fleet(domain.CloudTerminated, domain.CloudRunning, domain.CloudTerminated, domain.CloudShuttingDown)
	all["a"].terminatedAt = now.Add(-time.Hour)               // retention just over
	all["c"].terminatedAt = now.Add(-time.Hour + time.Second) // still described
	if got := ids(ec2like.Sorted(all)); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("sorted %v", got)
	}
	if n := ec2like.Live(all); n != 2 {
		t.Errorf("live %d, want 2", n)
	}
	ec2like.Purge(all, time.Hour, now)
	if got := ids(ec2like.Sorted(all)); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("after purge %v, want b c d", got)
	}
}

func TestHasTags(t *testing.T) {
	have := map[string]string{"a": "1", "b": ""}
	tests := []struct {
		want  map[string]string
		match bool
	}{
		{nil, true},
		{map[string]string{"a": "1"}, true},
		{map[string]string{"a": "1", "b": ""}, true},
		{map[string]string{"a": "2"}, false},
		{map[string]string{"c": ""}, false},
	}
	for _, tt := range tests {
		if got := ec2like.HasTags(have, tt.want); got != tt.match {
			t.Errorf("HasTags(%v, %v) = %v", have, tt.want, got)
		}
	}
}

func TestSnapshotAndCloneTagsShareNothing(t *testing.T) {
	if tags := ec2like.CloneTags(nil); tags == nil {
		t.Error("CloneTags(nil) is nil; tags could not be added to it")
	}
	inst := domain.CloudInstance{ID: "a", State: domain.CloudRunning, Tags: map[string]string{"k": "v"}}
	snap := ec2like.Snapshot(inst)
	snap.Tags["k"] = "changed"
	if inst.Tags["k"] != "v" || snap.ID != "a" || snap.State != domain.CloudRunning {
		t.Errorf("snapshot %+v of %+v", snap, inst)
	}
}
