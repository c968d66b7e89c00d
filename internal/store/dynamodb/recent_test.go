package dynamodb_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// twoStores are two stores on one table, as two replicas have: a, whose
// reads are counted, and b, the other replica.
type twoStores struct {
	a, b  *dynamodb.Store
	reads *readMeter
	clk   *clock.Virtual
	in    domain.Instance
}

func newTwoStores(t *testing.T, opts dynamodb.Options) *twoStores {
	t.Helper()
	client, table := newTable(t)
	clk := clock.NewVirtual(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	reads := &readMeter{API: client}
	a, err := dynamodb.New(reads, table, clk, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dynamodb.New(client, table, clk, dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := domain.Instance{ID: "bp-recent", State: domain.StateReady, Runner: "small", Deadline: clk.Now().Add(time.Hour)}
	if err := b.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
		t.Fatal(err)
	}
	return &twoStores{a: a, b: b, reads: reads, clk: clk, in: in}
}

// read is a's consistent read of the instance.
func (w *twoStores) read(t *testing.T) domain.Instance {
	t.Helper()
	in, err := w.a.GetInstance(t.Context(), w.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// readThenOtherStops is a's read of the ready instance, then b's change of
// it to stopping.
func (w *twoStores) readThenOtherStops(t *testing.T) {
	t.Helper()
	w.read(t)
	if _, err := w.b.Transition(t.Context(), w.in.ID, domain.Guard{State: domain.StateReady}, func(i *domain.Instance) {
		i.State = domain.StateStopping
	}); err != nil {
		t.Fatal(err)
	}
}

func serveOne(i *domain.Instance) { i.JobsServed++ }

// A change that follows a read of its row decides on the row read: one
// read in all, and the row written is the one decided on.
func TestAChangeAfterAReadDoesNotReadAgain(t *testing.T) {
	w := newTwoStores(t, dynamodb.Options{})
	read := w.read(t)
	got, err := w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(read), serveOne)
	if err != nil {
		t.Fatal(err)
	}
	if n := w.reads.getCalls(); n != 1 {
		t.Errorf("%d consistent reads for a read and a change; want 1", n)
	}
	stored, err := w.b.GetInstance(t.Context(), w.in.ID)
	if err != nil || stored.JobsServed != 1 || stored.Version != read.Version+1 || got.Version != stored.Version {
		t.Fatalf("stored %+v (%v), returned version %d; want one job served at version %d", stored, err, got.Version, read.Version+1)
	}
	// Its own write is remembered too: a second change reads nothing.
	if _, err := w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(got), serveOne); err != nil {
		t.Fatal(err)
	}
	if n := w.reads.getCalls(); n != 1 {
		t.Errorf("%d consistent reads after a second change; want still 1", n)
	}
}

// The other replica moved the row after a read: the change is decided
// again on the row as it is, which the refused write returned, and the
// guard that matched the row as read refuses it.
func TestAChangeOnARowThatMovedIsDecidedOnTheRowAsItIs(t *testing.T) {
	var told []string
	w := newTwoStores(t, dynamodb.Options{Refused: func(row string, remembered bool) {
		told = append(told, fmt.Sprintf("%s remembered=%t", row, remembered))
	}})
	w.readThenOtherStops(t)
	_, err := w.a.Transition(t.Context(), w.in.ID, domain.Guard{State: domain.StateReady}, serveOne)
	if !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("change guarded on ready after the row became stopping: %v; want ErrConflict", err)
	}
	if n := w.reads.getCalls(); n != 1 {
		t.Errorf("%d consistent reads; want 1: the refused write returns the row", n)
	}
	stored, _ := w.b.GetInstance(t.Context(), w.in.ID)
	if stored.State != domain.StateStopping || stored.JobsServed != 0 {
		t.Fatalf("stored %s with %d jobs; want stopping, none served", stored.State, stored.JobsServed)
	}
	if !slices.Equal(told, []string{"instance remembered=true"}) {
		t.Errorf("refused writes told: %q; want the one on the remembered instance", told)
	}
}

// A guard refused on the row as read is tried again on the row as it is:
// the other replica may have made it match since.
func TestARefusalOnARowReadBeforeIsDecidedAgain(t *testing.T) {
	w := newTwoStores(t, dynamodb.Options{})
	w.readThenOtherStops(t)
	got, err := w.a.Transition(t.Context(), w.in.ID, domain.Guard{State: domain.StateStopping}, serveOne)
	if err != nil || got.State != domain.StateStopping || got.JobsServed != 1 {
		t.Fatalf("change guarded on stopping, the row's state now: %+v, %v; want it done", got, err)
	}
}

// A heartbeat recorded by the other replica leaves the version alone: a
// change decided on the row as read before it is decided again, so the row
// it returns has the heartbeat, and the heartbeat stays stored.
func TestAChangeAfterAnotherReplicasHeartbeatSeesIt(t *testing.T) {
	w := newTwoStores(t, dynamodb.Options{})
	read := w.read(t)
	beat := w.clk.Now().Add(time.Second)
	if err := w.b.RecordHeartbeat(t.Context(), w.in.ID, beat); err != nil {
		t.Fatal(err)
	}
	got, err := w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(read), serveOne)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Heartbeat.Equal(beat) || got.JobsServed != 1 {
		t.Errorf("returned heartbeat %s, %d jobs; want the other replica's %s, 1 job", got.Heartbeat, got.JobsServed, beat)
	}
	stored, _ := w.b.GetInstance(t.Context(), w.in.ID)
	if !stored.Heartbeat.Equal(beat) {
		t.Errorf("stored heartbeat %s; want %s", stored.Heartbeat, beat)
	}
	// This store's own heartbeat keeps the remembered row as stored.
	own := beat.Add(time.Second)
	if err := w.a.RecordHeartbeat(t.Context(), w.in.ID, own); err != nil {
		t.Fatal(err)
	}
	reads, refused := w.reads.getsAndRefused()
	if got, err = w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(got), serveOne); err != nil || !got.Heartbeat.Equal(own) {
		t.Fatalf("change after its own heartbeat: heartbeat %s, %v; want %s", got.Heartbeat, err, own)
	}
	if g, r := w.reads.getsAndRefused(); g != reads || r != refused {
		n, m := g-reads, r-refused
		t.Errorf("a change after this store's own heartbeat: %d consistent reads, %d refused writes; want none", n, m)
	}
}

// A row is remembered for Options.Recent only; a negative Recent reads
// the row before every change.
func TestARowIsRememberedForAMomentOnly(t *testing.T) {
	w := newTwoStores(t, dynamodb.Options{Recent: time.Second})
	read := w.read(t)
	w.clk.Advance(time.Second)
	if _, err := w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(read), serveOne); err != nil {
		t.Fatal(err)
	}
	if n := w.reads.getCalls(); n != 2 {
		t.Errorf("%d consistent reads for a change a second after the read; want 2", n)
	}

	w = newTwoStores(t, dynamodb.Options{Recent: -1})
	read = w.read(t)
	if _, err := w.a.Transition(t.Context(), w.in.ID, domain.GuardOf(read), serveOne); err != nil {
		t.Fatal(err)
	}
	if n := w.reads.getCalls(); n != 2 {
		t.Errorf("%d consistent reads with Recent -1; want 2", n)
	}
}
