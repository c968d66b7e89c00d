package appplatform

import (
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestCountDemand(t *testing.T) {
	q := func(labels ...string) domain.GitHubJob { return domain.GitHubJob{Status: "queued", Labels: labels} }
	run := func(runner string, labels ...string) domain.GitHubJob {
		return domain.GitHubJob{Status: "in_progress", RunnerName: runner, Labels: labels}
	}
	cases := []struct {
		name    string
		queued  []domain.GitHubJob
		running []domain.GitHubJob
		prefix  string
		want    Demand
	}{
		{"nothing", nil, nil, "do-", Demand{}},
		{"queued self-hosted jobs count, others not", []domain.GitHubJob{q("self-hosted", "linux"), q("ubuntu-latest"), q("linux"), q()}, nil, "do-", Demand{Queued: 1}},
		{"the label matches in any case", []domain.GitHubJob{q("Self-Hosted"), q("SELF-HOSTED", "x64")}, nil, "", Demand{Queued: 2}},
		{"a label containing self-hosted is not it", []domain.GitHubJob{q("self-hosted-gpu"), q("not-self-hosted")}, nil, "", Demand{}},
		{"the prefix picks in-progress jobs", nil, []domain.GitHubJob{run("do-1", "self-hosted"), run("do-2"), run("other-1", "self-hosted"), run("")}, "do-", Demand{InProgress: 2}},
		{"the prefix is case-sensitive, as the specification's startswith", nil, []domain.GitHubJob{run("DO-1", "self-hosted")}, "do-", Demand{}},
		{"without a prefix every self-hosted in-progress job counts", nil, []domain.GitHubJob{run("any", "self-hosted"), run("", "self-hosted"), run("GitHub Actions 3", "ubuntu-latest")}, "", Demand{InProgress: 2}},
		{"a job in the wrong list by status is not counted", []domain.GitHubJob{run("do-1", "self-hosted")}, []domain.GitHubJob{q("self-hosted")}, "do-", Demand{}},
		{"both", []domain.GitHubJob{q("self-hosted"), q("self-hosted")}, []domain.GitHubJob{run("do-a", "self-hosted")}, "do-", Demand{Queued: 2, InProgress: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CountDemand(c.queued, c.running, c.prefix)
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if got.Total() != c.want.Queued+c.want.InProgress {
				t.Fatalf("total %d", got.Total())
			}
		})
	}
}

func TestDeadRunners(t *testing.T) {
	runners := []domain.GitHubRunner{
		{ID: 1, Name: "do-dead"},
		{ID: 2, Name: "do-busy", Busy: true},
		{ID: 3, Name: "do-online", Online: true},
		{ID: 4, Name: "do-working", Online: true, Busy: true},
		{ID: 5, Name: "other-dead"},
	}
	cases := []struct {
		prefix string
		want   []int64
	}{
		{"do-", []int64{1}},
		{"", []int64{1, 5}},
		{"nobody-", nil},
	}
	for _, c := range cases {
		var ids []int64
		for _, r := range DeadRunners(runners, c.prefix) {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, c.want) {
			t.Errorf("prefix %q: %v, want %v", c.prefix, ids, c.want)
		}
	}
}
