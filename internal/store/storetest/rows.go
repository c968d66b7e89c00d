package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// rowKind is one kind of row (instances, jobs) as the contracts both keep
// see it. Instances and jobs make the same promises through different
// types, so those contracts are written once, over a rowKind.
type rowKind[ID comparable, Row, Req, Res any] struct {
	get func(e *env, id ID) Row
	// lookup is get's store call, for a row that may be missing.
	lookup func(e *env, id ID) (Row, error)
	// all lists every row the store holds, and ids their ids.
	all       func(e *env) []Row
	ids       func([]Row) []ID
	same      func(t *testing.T, what string, got, want Row)
	unchanged func(e *env, before Row)
	// meta is what every kind of row keeps for the store: its id, version
	// and when it last changed.
	meta   func(Row) (id ID, version int64, updated time.Time)
	batch  func(e *env, reqs []Req) ([]Res, error)
	reqID  func(Req) ID
	result func(Res) (Row, error)
	// conflictErr and transitionErr are the kind's refusals: a guard that
	// does not match, and a change its lifecycle forbids.
	conflictErr, transitionErr errorKind
}

var instanceRows = rowKind[string, domain.Instance, domain.TransitionRequest, domain.TransitionResult]{
	get:    (*env).get,
	lookup: func(e *env, id string) (domain.Instance, error) { return e.s.GetInstance(e.ctx, id) },
	all:    func(e *env) []domain.Instance { return e.list(domain.InstanceFilter{}) },
	ids:    ids,
	same:   sameInstance, unchanged: (*env).unchanged,
	meta: func(i domain.Instance) (string, int64, time.Time) { return i.ID, i.Version, i.UpdatedAt },
	batch: func(e *env, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
		return e.s.TransitionBatch(e.ctx, reqs)
	},
	reqID:         func(r domain.TransitionRequest) string { return r.ID },
	result:        func(r domain.TransitionResult) (domain.Instance, error) { return r.Instance, r.Err },
	conflictErr:   conflictOf[*domain.ConflictError](),
	transitionErr: errorOf[*domain.TransitionError](),
}

var jobRows = rowKind[int64, domain.Job, domain.JobTransitionRequest, domain.JobTransitionResult]{
	get:    (*env).getJob,
	lookup: func(e *env, id int64) (domain.Job, error) { return e.s.GetJob(e.ctx, id) },
	all:    func(e *env) []domain.Job { return e.listJobs(domain.JobFilter{}) },
	ids:    jobIDs,
	same:   sameJob, unchanged: (*env).jobUnchanged,
	meta: func(j domain.Job) (int64, int64, time.Time) { return j.ID, j.Version, j.UpdatedAt },
	batch: func(e *env, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
		return e.s.TransitionJobs(e.ctx, reqs)
	},
	reqID:         func(r domain.JobTransitionRequest) int64 { return r.ID },
	result:        func(r domain.JobTransitionResult) (domain.Job, error) { return r.Job, r.Err },
	conflictErr:   conflictOf[*domain.JobConflictError](),
	transitionErr: errorOf[*domain.JobTransitionError](),
}

// errorKind recognises one kind of error, and names it in messages.
type errorKind struct {
	name string
	is   func(error) bool
}

// errorOf is the errors that hold an E.
func errorOf[E error]() errorKind {
	var target E
	return errorKind{fmt.Sprintf("a %T", target), func(err error) bool {
		_, ok := as[E](err)
		return ok
	}}
}

// as returns the E that err holds, if it holds one.
func as[E error](err error) (E, bool) {
	var target E
	ok := errors.As(err, &target)
	return target, ok
}

// refusedAs fails unless err holds a refusal equal to want (its every
// field), and is sentinel too when that is not nil.
func refusedAs[T comparable, E interface {
	*T
	error
}](t *testing.T, err, sentinel error, want T) {
	t.Helper()
	got, ok := as[E](err)
	if !ok || sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want a %T", err, got)
	}
	if *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
	}
}

// conflictOf is the errors that hold an E and are ErrConflict.
func conflictOf[E error]() errorKind {
	typed := errorOf[E]()
	return errorKind{typed.name, func(err error) bool { return errors.Is(err, domain.ErrConflict) && typed.is(err) }}
}

// anyConflict is ErrConflict however a backend wraps it.
var anyConflict = errorKind{"ErrConflict", func(err error) bool { return errors.Is(err, domain.ErrConflict) }}

// outcome is what one request of a batch should come to.
type outcome int

const (
	wins outcome = iota
	conflicts
	notFound
	illegal
)

// batchCase is one request of a batch and what it should come to.
type batchCase[Req any] struct {
	req  Req
	want outcome
}

// checkOutcome reports, and lets the test go on, a request's err that is
// not the outcome it should have come to.
func (k rowKind[ID, Row, Req, Res]) checkOutcome(t *testing.T, n int, want outcome, err error) {
	t.Helper()
	switch {
	case want == wins && err != nil:
		t.Errorf("request %d: got %v, want success", n, err)
	case want == conflicts && !k.conflictErr.is(err):
		t.Errorf("request %d: got %v, want %s", n, err, k.conflictErr.name)
	case want == notFound && !errors.Is(err, domain.ErrNotFound):
		t.Errorf("request %d: got %v, want ErrNotFound", n, err)
	case want == illegal && !k.transitionErr.is(err):
		t.Errorf("request %d: got %v, want %s", n, err, k.transitionErr.name)
	}
}

// absent fails unless the store has no row id.
func (k rowKind[ID, Row, Req, Res]) absent(t *testing.T, e *env, id ID) {
	t.Helper()
	if _, err := k.lookup(e, id); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("get %v: got %v, want ErrNotFound", id, err)
	}
}

// empty fails unless the store holds no row after what, a call that was
// to write none.
func (k rowKind[ID, Row, Req, Res]) empty(t *testing.T, e *env, what string) {
	t.Helper()
	if rows := k.all(e); len(rows) != 0 {
		t.Fatalf("%s wrote %v", what, k.ids(rows))
	}
}

// filterCase is a list filter and the ids it selects, in order.
type filterCase[F any, ID comparable] struct {
	name string
	f    F
	want []ID
}

// checkFilters runs each case as a subtest: listIDs(f) must be its ids.
func checkFilters[F any, ID comparable](t *testing.T, cases []filterCase[F, ID], listIDs func(F) []ID) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := listIDs(c.f); !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// byID indexes rows by id.
func (k rowKind[ID, Row, Req, Res]) byID(rows []Row) map[ID]Row {
	out := make(map[ID]Row, len(rows))
	for _, r := range rows {
		id, _, _ := k.meta(r)
		out[id] = r
	}
	return out
}

// checkMixedBatch sends the requests of cases as one batch, and wants each
// result to be its case's outcome, in request order: a winner written at
// the next version and at now, and stored as returned; a refused row as it
// was before.
func (k rowKind[ID, Row, Req, Res]) checkMixedBatch(t *testing.T, e *env, cases []batchCase[Req], before map[ID]Row, now time.Time) {
	t.Helper()
	reqs := make([]Req, len(cases))
	for n, c := range cases {
		reqs[n] = c.req
	}
	results, err := k.batch(e, reqs)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(results) != len(reqs) {
		t.Fatalf("got %d results for %d requests", len(results), len(reqs))
	}
	for n, c := range cases {
		got, refused := k.result(results[n])
		k.checkOutcome(t, n, c.want, refused)
		id := k.reqID(c.req)
		switch {
		case c.want == wins:
			_, was, _ := k.meta(before[id])
			if gotID, version, updated := k.meta(got); gotID != id || version != was+1 || !updated.Equal(now) {
				t.Errorf("request %d: wrote %+v", n, got)
			}
			k.same(t, "stored winner", k.get(e, id), got)
		case c.want != notFound:
			k.unchanged(e, before[id])
		}
	}
}

func (k rowKind[ID, Row, Req, Res]) checkEmptyBatch(t *testing.T, e *env) {
	t.Helper()
	results, err := k.batch(e, nil)
	if err != nil || len(results) != 0 {
		t.Fatalf("empty batch: %v, %v", results, err)
	}
}

// batchWinner sends reqs, several changes of one row under the same guard,
// as one batch: whatever order a backend applies them in, exactly one may
// win and the others conflict. It returns the winner's index.
func (k rowKind[ID, Row, Req, Res]) batchWinner(t *testing.T, e *env, did string, reqs ...Req) int {
	t.Helper()
	results, err := k.batch(e, reqs)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	errs := make([]error, len(results))
	for n, r := range results {
		_, errs[n] = k.result(r)
	}
	return soleWinner(t, "request", did, errs, anyConflict)
}

// soleWinner wants exactly one racer's error nil, and every other racer's
// a loser's; it returns the winner's index.
func soleWinner(t *testing.T, racer, did string, errs []error, loser errorKind) int {
	t.Helper()
	winner := -1
	for n, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%ss %d and %d both %s", racer, winner, n, did)
		case err == nil:
			winner = n
		case !loser.is(err):
			t.Fatalf("%s %d: got %v, want %s", racer, n, err, loser.name)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s %s", racer, did)
	}
	return winner
}

// raceBatches has workers send batches over overlapping windows of ids at
// once, half of them walking their window backwards so that a backend
// locking rows in request order meets the opposite order too. Each request
// either wins or conflicts, and no row is won twice. It returns each won
// row's holder: worker w's requests are request(id, holder(w)).
func (k rowKind[ID, Row, Req, Res]) raceBatches(t *testing.T, e *env, ids []ID, holder func(w int) string, request func(id ID, holder string) Req) map[ID]string {
	t.Helper()
	const (
		workers = 16
		window  = 12
		stride  = 3
	)
	reqs := make([][]Req, workers)
	results := make([][]Res, workers)
	errs := make([]error, workers)
	for w := range workers {
		for n := range window {
			reqs[w] = append(reqs[w], request(ids[(w*stride+n)%len(ids)], holder(w)))
		}
		if w%2 == 1 {
			slices.Reverse(reqs[w])
		}
	}
	race(workers, func(w int) { results[w], errs[w] = k.batch(e, reqs[w]) })

	heldBy := map[ID]string{}
	for w := range workers {
		if errs[w] != nil || len(results[w]) != len(reqs[w]) {
			t.Fatalf("worker %d: %d results for %d requests, %v", w, len(results[w]), len(reqs[w]), errs[w])
		}
		for n, r := range results[w] {
			id := k.reqID(reqs[w][n])
			switch _, err := k.result(r); {
			case err == nil && heldBy[id] != "":
				t.Fatalf("%v won twice: by %s and %s", id, heldBy[id], holder(w))
			case err == nil:
				heldBy[id] = holder(w)
			case !errors.Is(err, domain.ErrConflict):
				t.Fatalf("worker %d, %v: got %v, want success or ErrConflict", w, id, err)
			}
		}
	}
	return heldBy
}
