package dynamodb

import (
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// recentRows are the rows this store read by id (GetItem) or wrote itself
// in a transition, each for a moment after. A transition decides on such
// a row without reading it again, and its write is conditioned on the
// row's version and heartbeat both being as remembered: the only write
// that leaves the version alone is a heartbeat's, so the condition
// holding means the row was exactly the one decided on. When it does not
// hold, the refusal returns the row as it is, and the transition decides
// again on that.
//
// Most transitions follow a read of the same row within milliseconds (an
// agent's request authenticates by reading its instance, then changes it),
// so on DynamoDB this saves one strongly consistent read per change, at
// the cost of a refused write when the row changed meanwhile unknown to
// this store (another replica's change or heartbeat).
type recentRows struct {
	mu   sync.Mutex
	keep time.Duration
	rows map[string]recentRow
	// swept is when the rows older than keep last went.
	swept time.Time
}

type recentRow struct {
	item map[string]types.AttributeValue
	at   time.Time
}

// maxRecentRows bounds the memory: the rows older than keep go every keep
// or so, and all of them if there are this many.
const maxRecentRows = 8192

func newRecentRows(keep time.Duration) *recentRows {
	return &recentRows{keep: keep, rows: map[string]recentRow{}}
}

// put remembers item, as stored at now. Items are never changed in place,
// so the map is shared, not copied.
func (r *recentRows) put(item map[string]types.AttributeValue, now time.Time) {
	if r.keep <= 0 || item == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) >= r.keep {
		maps.DeleteFunc(r.rows, func(_ string, v recentRow) bool { return now.Sub(v.at) >= r.keep })
		r.swept = now
	}
	if len(r.rows) >= maxRecentRows {
		clear(r.rows)
	}
	r.rows[getS(item, attrPK)] = recentRow{item: item, at: now}
}

// take returns the row of key remembered less than keep before now, and
// forgets it: whoever takes it writes the row, and remembers what it wrote.
func (r *recentRows) take(key map[string]types.AttributeValue, now time.Time) map[string]types.AttributeValue {
	if r.keep <= 0 {
		return nil
	}
	pk := getS(key, attrPK)
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.rows[pk]
	delete(r.rows, pk)
	if !ok || now.Sub(v.at) >= r.keep {
		return nil
	}
	return v.item
}

// beat notes a heartbeat this store wrote on the row of key. A newer one
// remembered (another replica's, read since) stays: heartbeats only move
// forward, and times formatted alike compare as strings do.
func (r *recentRows) beat(key map[string]types.AttributeValue, at string) {
	if r.keep <= 0 {
		return
	}
	pk := getS(key, attrPK)
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.rows[pk]; ok && getS(v.item, attrBeat) < at {
		v.item = maps.Clone(v.item)
		v.item[attrBeat] = str(at)
		r.rows[pk] = v
	}
}

// forget drops the rows of keys: deleted, or written by a transaction.
func (r *recentRows) forget(keys ...map[string]types.AttributeValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		delete(r.rows, getS(k, attrPK))
	}
}
