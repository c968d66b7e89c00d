package api

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
)

// /spot lists each open breaker (runner, opened_at, until, interruptions)
// until its cooldown ends, and an empty list, not null, when none is open.
func TestSpotListsOpenBreakers(t *testing.T) {
	r := newRig(t)
	b, err := spotbreaker.New(spotbreaker.Options{}, r.clk, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.srv.SpotBreakers = b.Opened
	var empty struct{ Open []map[string]any }
	if r.getJSON("/api/v1/spot", &empty); empty.Open == nil || len(empty.Open) != 0 {
		t.Fatalf("no breaker open: %+v, want an empty list", empty)
	}
	opened := r.clk.Now()
	b.Record("spot-x64", opened)
	b.Record("spot-x64", opened)
	var got struct{ Open []map[string]any }
	r.getJSON("/api/v1/spot", &got)
	want := map[string]any{"runner": "spot-x64", "opened_at": opened.Format(time.RFC3339),
		"until": opened.Add(30 * time.Minute).Format(time.RFC3339), "interruptions": float64(2)}
	if len(got.Open) != 1 || len(got.Open[0]) != len(want) {
		t.Fatalf("open breakers %+v, want %+v", got.Open, want)
	}
	for k, v := range want {
		if got.Open[0][k] != v {
			t.Errorf("%s: %v, want %v", k, got.Open[0][k], v)
		}
	}
	r.clk.Advance(30 * time.Minute)
	var after struct{ Open []map[string]any }
	if r.getJSON("/api/v1/spot", &after); len(after.Open) != 0 {
		t.Fatalf("open breakers %+v after the cooldown", after.Open)
	}
	if rec := r.getAs("/api/v1/spot", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", rec.Code)
	}
}

// A job whose spot machine was taken back says so, and whether it was
// re-run; other jobs carry neither field.
func TestAnInterruptedJobSaysSo(t *testing.T) {
	r := newRig(t)
	j := domain.Job{ID: 900, RunID: 9000, Repo: "acme/app", Status: domain.JobCompleted, Route: domain.RouteLaunch,
		Interrupted: true, Rerun: true}
	if _, err := r.store.CreateJobs(t.Context(), []domain.Job{j}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	r.getJSON("/api/v1/jobs/900", &got)
	if got["interrupted"] != true || got["rerun"] != true {
		t.Fatalf("job %v, want interrupted and rerun", got)
	}
}
