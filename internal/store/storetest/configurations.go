package storetest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func (e *env) putConfig(c domain.ConfigRecord) {
	e.t.Helper()
	if err := e.s.PutConfiguration(e.ctx, c); err != nil {
		e.t.Fatalf("put configuration %s: %v", c.Source, err)
	}
}

// wantConfig checks what is kept for source: want, or nothing when want
// has no source.
func (e *env) wantConfig(source string, want domain.ConfigRecord) {
	e.t.Helper()
	got, found, err := e.s.GetConfiguration(e.ctx, source)
	if err != nil {
		e.t.Fatalf("get configuration %s: %v", source, err)
	}
	if found != (want.Source != "") {
		e.t.Fatalf("get configuration %s: found %v, want %v", source, found, want.Source != "")
	}
	if got.Source != want.Source || !bytes.Equal(got.Data, want.Data) || !got.At.Equal(want.At) || got.At.Location() != time.UTC {
		e.t.Fatalf("get configuration %s: got %q %q %v, want %q %q %v (in UTC)", source, got.Source, got.Data, got.At, want.Source, want.Data, want.At)
	}
}

func testConfigurationRoundTrip(t *testing.T, e *env) {
	const src = "github://acme/.github-private/.github/runs-on.yml"
	e.wantConfig(src, domain.ConfigRecord{})
	// Bytes a YAML file may hold, and a time in another zone.
	first := domain.ConfigRecord{Source: src, Data: []byte("pools:\n  small: {} # café\n\x00\xff"), At: start.In(time.FixedZone("CET", 3600))}
	e.putConfig(first)
	first.At = first.At.UTC()
	e.wantConfig(src, first)

	second := domain.ConfigRecord{Source: src, Data: []byte("pools: {}\n"), At: start.Add(time.Minute)}
	e.putConfig(second)
	e.wantConfig(src, second)
}

func testConfigurationSources(t *testing.T, e *env) {
	a := domain.ConfigRecord{Source: "runs-on.yml", Data: []byte("a"), At: start}
	b := domain.ConfigRecord{Source: "/etc/bullpen/runs-on.yml", Data: []byte("b"), At: start.Add(time.Second)}
	e.putConfig(a)
	e.putConfig(b)
	e.wantConfig(a.Source, a)
	e.wantConfig(b.Source, b)
	e.wantConfig("Runs-On.yml", domain.ConfigRecord{})
}

func testConfigurationRefused(t *testing.T, e *env) {
	kept := domain.ConfigRecord{Source: "f", Data: []byte("pools: {}"), At: start}
	e.putConfig(kept)
	for _, c := range []struct {
		rec  domain.ConfigRecord
		want string
	}{
		{domain.ConfigRecord{Data: []byte("x"), At: start}, "no source"},
		{domain.ConfigRecord{Source: "f", At: start}, "no data"},
		{domain.ConfigRecord{Source: "f", Data: []byte("x")}, "no time"},
		{domain.ConfigRecord{Source: "f", Data: make([]byte, domain.MaxConfigurationBytes+1), At: start}, "over the"},
	} {
		err := e.s.PutConfiguration(e.ctx, c.rec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("put %q (%d bytes): got %v, want an error naming %q", c.rec.Source, len(c.rec.Data), err, c.want)
		}
	}
	e.wantConfig("f", kept)
	// The largest file kept is kept whole.
	big := domain.ConfigRecord{Source: "big", Data: bytes.Repeat([]byte("# line\n"), domain.MaxConfigurationBytes/7), At: start}
	e.putConfig(big)
	e.wantConfig("big", big)
}
