package dynamodb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// rowKind is one kind of row as the store reads and changes it: how to
// find, decide and encode it. The reads, the conditional write and the
// retries are the same for instances and jobs and are written once below.
type rowKind[ID comparable, Row, Guard, Req, Res any] struct {
	noun    string
	batchOp string // names the batch call in its errors
	key     func(ID) map[string]types.AttributeValue
	encode  func(*Store, Row) (map[string]types.AttributeValue, error)
	decode  func(map[string]types.AttributeValue) (Row, error)
	// apply is the domain's decision (domain.ApplyTransition and its job
	// twin); validate refuses what the table could not hold (see decide).
	apply    func(cur Row, g Guard, now time.Time, fn func(*Row)) (Row, error)
	validate func(Row) error
	version  func(Row) int64
	// listOrder is a listing's: by creation, then by id.
	listOrder func(a, b Row) int
	// request and result are the port's batch request and outcome.
	request func(Req) (ID, Guard, func(*Row))
	result  func(Row, error) Res
}

var instanceKind = rowKind[string, domain.Instance, domain.Guard, domain.TransitionRequest, domain.TransitionResult]{
	noun: "instance", batchOp: "transition batch", key: instanceKey,
	encode: (*Store).instanceItem, decode: decodeInstance,
	apply: domain.ApplyTransition, validate: domain.Instance.Validate,
	version: func(i domain.Instance) int64 { return i.Version },
	listOrder: func(a, b domain.Instance) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	},
	request: func(r domain.TransitionRequest) (string, domain.Guard, func(*domain.Instance)) {
		return r.ID, r.Guard, r.Apply
	},
	result: func(i domain.Instance, err error) domain.TransitionResult {
		return domain.TransitionResult{Instance: i, Err: err}
	},
}

var jobKind = rowKind[int64, domain.Job, domain.JobGuard, domain.JobTransitionRequest, domain.JobTransitionResult]{
	noun: "job", batchOp: "transition jobs", key: jobKey,
	encode: (*Store).jobItem, decode: decodeJob,
	apply: domain.ApplyJobTransition, validate: domain.Job.Validate,
	version: func(j domain.Job) int64 { return j.Version },
	listOrder: func(a, b domain.Job) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	},
	request: func(r domain.JobTransitionRequest) (int64, domain.JobGuard, func(*domain.Job)) {
		return r.ID, r.Guard, r.Apply
	},
	result: func(j domain.Job, err error) domain.JobTransitionResult {
		return domain.JobTransitionResult{Job: j, Err: err}
	},
}

// decide returns the row to write, its times in UTC, or why the
// transition is refused.
func (k *rowKind[ID, Row, Guard, Req, Res]) decide(cur Row, g Guard, now time.Time, fn func(*Row)) (Row, error) {
	next, refused := k.apply(cur, g, now, fn)
	if refused != nil {
		var zero Row
		return zero, refused
	}
	utcTimes(&next)
	return next, k.validate(next)
}

// read is the port's Get: the row read consistently, or ErrNotFound.
func (k *rowKind[ID, Row, Guard, Req, Res]) read(ctx context.Context, s *Store, id ID) (Row, error) {
	var zero Row
	if err := s.checkOpen(); err != nil {
		return zero, fmt.Errorf("get %s %v: %w", k.noun, id, err)
	}
	row, found, err := k.get(ctx, s, id)
	if err != nil {
		return zero, fmt.Errorf("get %s %v: %w", k.noun, id, err)
	}
	if !found {
		return zero, fmt.Errorf("%s %v: %w", k.noun, id, domain.ErrNotFound)
	}
	return row, nil
}

// matching decodes items and keeps the rows that match.
func (k *rowKind[ID, Row, Guard, Req, Res]) matching(items []map[string]types.AttributeValue, match func(Row) bool) ([]Row, error) {
	var out []Row
	for _, item := range items {
		row, err := k.decode(item)
		if err != nil {
			return nil, err
		}
		if match(row) {
			out = append(out, row)
		}
	}
	return out, nil
}

// find returns the rows the lookups find that keep keeps. Every index is
// sorted as a listing is (created, then id), so with a limit each lookup
// reads in the order asked for (newest first or oldest) and stops once it
// has found limit rows: the first limit of all the lookups' rows together
// are among those. Without one (limit 0), every row is read.
func (k *rowKind[ID, Row, Guard, Req, Res]) find(ctx context.Context, s *Store, ls []lookup, newest bool, limit int,
	keep func(Row) bool) ([]Row, error) {
	var out []Row
	for _, l := range ls {
		l.newest = newest
		found := 0
		err := s.query(ctx, l, max(limit, 0), func(items []map[string]types.AttributeValue) (bool, error) {
			rows, err := k.matching(items, keep)
			if err != nil {
				return false, err
			}
			out = append(out, rows...)
			found += len(rows)
			return limit > 0 && found >= limit, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// listing is rows as a listing returns them: in listOrder, newest first
// when newest, and no more than limit of them (0: no limit).
func (k *rowKind[ID, Row, Guard, Req, Res]) listing(rows []Row, newest bool, limit int) []Row {
	slices.SortFunc(rows, func(a, b Row) int {
		c := k.listOrder(a, b)
		if newest {
			return -c
		}
		return c
	})
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows
}

// poolLookups are the index queries that find a kind's rows in pool and
// states (an instance's, a job's statuses), either of which may be unset.
// final tells the states a row stays in once it is done.
func poolLookups[V ~string](kind, pool string, states []V, final func(V) bool) []lookup {
	switch {
	case pool != "" && len(states) > 0 && !slices.ContainsFunc(states, final):
		// The live states' partitions hold the kind's live rows now, every
		// pool's, a few minutes' worth; a pool's partition holds its every
		// row kept, finished ones too, days' worth. So a claim of a pool's
		// ready machine, a page of its live ones, or an autoscaler asking
		// for a pool's demand reads the live rows, not the pool's history.
		return partitionLookups(kind, states)
	case pool != "":
		return []lookup{{index: indexPool, attr: attrPool, value: kind + "#" + pool}}
	case len(states) > 0:
		return partitionLookups(kind, states)
	}
	return []lookup{{index: indexKind, attr: attrKind, value: kind}}
}

// partitionLookups query the state index's partition of each of a kind's
// states (an instance's state, a job's status), each once.
func partitionLookups[V ~string](kind string, values []V) []lookup {
	var out []lookup
	for _, v := range slices.Compact(slices.Sorted(slices.Values(values))) {
		out = append(out, lookup{index: indexState, attr: attrState, value: kind + "#" + string(v)})
	}
	return out
}

// pastOrder bounds each lookup to the rows after ord, the sort key of a
// listing's position, in the order the lookup reads. Every index is sorted
// by ord, so the bound is a key condition on each.
func pastOrder(ls []lookup, ord string) []lookup {
	out := slices.Clone(ls)
	for k := range out {
		out[k].after = ord
	}
	return out
}

// get reads one row consistently; found is false when there is none.
func (k *rowKind[ID, Row, Guard, Req, Res]) get(ctx context.Context, s *Store, id ID) (row Row, found bool, err error) {
	item, err := k.getItem(ctx, s, id)
	if err != nil || item == nil {
		return row, false, err
	}
	row, err = k.decode(item)
	return row, err == nil, err
}

// getItem reads one row's item consistently (nil when there is none), and
// remembers it for a transition that may follow.
func (k *rowKind[ID, Row, Guard, Req, Res]) getItem(ctx context.Context, s *Store, id ID) (map[string]types.AttributeValue, error) {
	out, err := s.api.GetItem(ctx, &awsdynamodb.GetItemInput{TableName: s.tbl(), Key: k.key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, describe("GetItem", s.table, err)
	}
	s.recent.put(out.Item, s.now())
	return out.Item, nil
}

// transition is the decision on the row as last read or written here (see
// recentRows) or as read now, and the write conditioned on the version
// decided on; when another writer got there first, it decides again on
// the row the refusal returns.
func (k *rowKind[ID, Row, Guard, Req, Res]) transition(ctx context.Context, s *Store, id ID, g Guard, fn func(*Row)) (Row, error) {
	var zero Row
	if err := s.checkOpen(); err != nil {
		return zero, fmt.Errorf("transition %s %v: %w", k.noun, id, err)
	}
	if fn == nil {
		fn = func(*Row) {}
	}
	item, remembered := s.recent.take(k.key(id), s.now()), true
	for attempt := 1; attempt <= maxAttempts; {
		if item == nil {
			var err error
			if item, err = k.getItem(ctx, s, id); err != nil {
				return zero, fmt.Errorf("transition %s %v: %w", k.noun, id, err)
			}
			if item == nil {
				return zero, fmt.Errorf("%s %v: %w", k.noun, id, domain.ErrNotFound)
			}
			remembered = false
		}
		next, after, err := k.attempt(ctx, s, id, item, remembered, g, fn)
		switch {
		case err == nil:
			s.recent.put(after, s.now())
			return next, nil
		case errors.Is(err, errStale):
			// A refusal decided on a remembered row is decided again on the
			// row as it is.
			item = nil
			continue
		case isConditionFailed(err):
			s.refused(k.noun, remembered)
			item, remembered = conflictItem(err), false
			if attempt++; attempt <= maxAttempts {
				if err := backoff(ctx, attempt); err != nil {
					return zero, err
				}
			}
			continue
		}
		return zero, err
	}
	return zero, fmt.Errorf("transition %s %v: %w", k.noun, id, errContended)
}

// errStale: a transition was refused on a remembered row, which may no
// longer be the row as it is.
var errStale = errors.New("refused on a remembered row")

// attempt decides the transition on item and writes it, conditioned on the
// version decided on (and on the heartbeat too when item is remembered
// rather than just read). It returns the row written and its item, the
// transition's refusal, or the write's.
func (k *rowKind[ID, Row, Guard, Req, Res]) attempt(ctx context.Context, s *Store, id ID, item map[string]types.AttributeValue, remembered bool, g Guard, fn func(*Row)) (next Row, after map[string]types.AttributeValue, err error) {
	cur, err := k.decode(item)
	if err != nil {
		return next, nil, fmt.Errorf("transition %s %v: %w", k.noun, id, err)
	}
	next, refused := k.decide(cur, g, s.now(), fn)
	if refused != nil {
		if remembered {
			return next, nil, errStale
		}
		return next, nil, refused
	}
	u, err := k.update(s, cur, next)
	if err != nil {
		return next, nil, err
	}
	if remembered {
		u = u.sameBeat(item)
	}
	// The write carries a mark of its own, so that when its answer is
	// lost and the SDK sends it again, the second try, refused because
	// the first raised the version, can tell that the row holds this
	// very write and not a competitor's.
	mark := writeMark()
	in := u.marked(mark).item(s.table)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err = s.api.UpdateItem(ctx, in)
	if isConditionFailed(err) && refusedBy(err, mark) {
		err = nil
	}
	if isConditionFailed(err) {
		return next, nil, err
	}
	if err != nil {
		return next, nil, fmt.Errorf("transition %s %v: %w", k.noun, id, describe("UpdateItem", s.table, err))
	}
	return next, u.after, nil
}

// update is the conditional write that turns cur into next.
func (k *rowKind[ID, Row, Guard, Req, Res]) update(s *Store, cur, next Row) (update, error) {
	before, err := k.encode(s, cur)
	if err != nil {
		return update{}, err
	}
	after, err := k.encode(s, next)
	if err != nil {
		return update{}, err
	}
	return newUpdate(before, after, k.version(cur)), nil
}

// update is one conditional UpdateItem, usable alone or in a transaction.
// after is the row's item as the update leaves it.
type update struct {
	key       map[string]types.AttributeValue
	expr      string
	condition string
	names     map[string]string
	values    map[string]types.AttributeValue
	after     map[string]types.AttributeValue
}

// newUpdate writes after's attributes over before's, on condition that the
// stored version is still before's. The heartbeat is written only when the
// row's own changed it, so a beat recorded meanwhile is not undone; index
// attributes after lacks are removed.
func newUpdate(before, after map[string]types.AttributeValue, version int64) update {
	u := update{
		after:     after,
		key:       map[string]types.AttributeValue{attrPK: after[attrPK], attrSK: after[attrSK]},
		condition: "#ver = :expect",
		names:     map[string]string{"#ver": attrVersion},
		values:    map[string]types.AttributeValue{":expect": num(version)},
	}
	var set, remove []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		if name == attrPK || name == attrSK || (name == attrBeat && getS(before, attrBeat) == getS(after, attrBeat)) {
			continue
		}
		n := "#ver"
		if name != attrVersion {
			n = "#a" + strconv.Itoa(len(u.names))
			u.names[n] = name
		}
		u.values[":v"+n[1:]] = after[name]
		set = append(set, n+" = :v"+n[1:])
	}
	for _, name := range indexed {
		if _, ok := after[name]; !ok {
			n := "#r" + strconv.Itoa(len(u.names))
			u.names[n] = name
			remove = append(remove, n)
		}
	}
	u.expr = "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		u.expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return u
}

// sameBeat is u also conditioned on the stored heartbeat being item's.
func (u update) sameBeat(item map[string]types.AttributeValue) update {
	u.names = maps.Clone(u.names)
	u.values = maps.Clone(u.values)
	u.names["#hb0"] = attrBeat
	if b, ok := item[attrBeat]; ok {
		u.values[":hb0"] = b
		u.condition += " AND #hb0 = :hb0"
	} else {
		u.condition += " AND attribute_not_exists(#hb0)"
	}
	return u
}

// marked is u also setting the row's write mark.
func (u update) marked(mark string) update {
	u.names = maps.Clone(u.names)
	u.values = maps.Clone(u.values)
	u.names["#mark"] = attrMark
	u.values[":mark"] = &types.AttributeValueMemberS{Value: mark}
	u.expr = strings.Replace(u.expr, "SET ", "SET #mark = :mark, ", 1)
	return u
}

func (u update) item(table string) *awsdynamodb.UpdateItemInput {
	return &awsdynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: u.key, UpdateExpression: aws.String(u.expr),
		ConditionExpression: aws.String(u.condition), ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
	}
}

func (u update) transact(table string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table), Key: u.key, UpdateExpression: aws.String(u.expr),
		ConditionExpression: aws.String(u.condition), ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
	}}
}

// transitionBatch applies independent transitions as parallel conditional
// writes. A transaction would make them all-or-nothing, which the port
// does not ask for, at twice the write cost; parallel single writes keep
// one request's conflict from failing the others. Since some writes may
// land while others fail, a failure of the store is that request's
// outcome, not the batch's: the error is only for a closed store.
func (k *rowKind[ID, Row, Guard, Req, Res]) transitionBatch(ctx context.Context, s *Store, reqs []Req) ([]Res, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("%s: %s batch: %w", k.batchOp, k.noun, err)
	}
	results := make([]Res, len(reqs))
	s.parallel(len(reqs), func(i int) {
		id, g, fn := k.request(reqs[i])
		row, err := k.transition(ctx, s, id, g, fn)
		results[i] = k.result(row, err)
	})
	return results, nil
}
