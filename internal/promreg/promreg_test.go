package promreg

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "A test counter."})
}

func TestRegisterRegistersEachCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, b := counter("a_total"), counter("b_total")
	if err := Register(reg, "test", a, b); err != nil {
		t.Fatal(err)
	}
	a.Inc()
	b.Inc()
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("gathered %d families, want 2", len(got))
	}
}

func TestRegisterWithoutRegistererDoesNothing(t *testing.T) {
	if err := Register(nil, "test", counter("a_total")); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterNamesTheOwnerOfACollectorThatFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, "first", counter("a_total")); err != nil {
		t.Fatal(err)
	}
	err := Register(reg, "second", counter("b_total"), counter("a_total"))
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) || !strings.HasPrefix(err.Error(), "second metrics: ") {
		t.Fatalf("err = %v, want an AlreadyRegisteredError named for second", err)
	}
}

func TestCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	v := Counters("c_total", "A test family.", "kind")
	if err := Register(reg, "test", v); err != nil {
		t.Fatal(err)
	}
	AtZero(v, "a", "b")
	got, err := reg.Gather()
	if err != nil || len(got) != 1 || len(got[0].GetMetric()) != 2 {
		t.Fatalf("gathered %v, %v; want one family of two series", got, err)
	}
	for _, m := range got[0].GetMetric() {
		if m.GetCounter().GetValue() != 0 {
			t.Errorf("%v: not at zero", m)
		}
	}
}
