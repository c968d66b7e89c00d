package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
)

func TestSpotListsOpenBreakers(t *testing.T) {
	r := newRig(t)
	var empty struct{ Open []spotbreaker.Open }
	r.getJSON("/api/v1/spot", &empty)
	if empty.Open == nil || len(empty.Open) != 0 {
		t.Fatalf("no breaker: %+v, want an empty list", empty)
	}
	until := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	r.srv.SpotBreakers = func() []spotbreaker.Open {
		return []spotbreaker.Open{{Runner: "spot-x64", OpenedAt: until.Add(-30 * time.Minute), Until: until, Interruptions: 2}}
	}
	var got struct{ Open []spotbreaker.Open }
	r.getJSON("/api/v1/spot", &got)
	if len(got.Open) != 1 || got.Open[0].Runner != "spot-x64" || !got.Open[0].Until.Equal(until) {
		t.Fatalf("open breakers %+v", got)
	}
	if rec := r.getAs("/api/v1/spot", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", rec.Code)
	}
}
