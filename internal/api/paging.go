package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// cursor is what "next" and after= carry: the position of a page's last
// row in the listing's order (created, then id) and which way the listing
// runs, in base64url JSON. It holds nothing of the filters, which come
// with each request, and nothing a caller is not shown in the row itself.
type cursor[ID int64 | string] struct {
	Order     string `json:"order"`      // "newest" or "oldest"
	CreatedAt string `json:"created_at"` // RFC 3339, to the nanosecond
	ID        ID     `json:"id"`
}

func orderName(newest bool) string {
	if newest {
		return "newest"
	}
	return "oldest"
}

// nextCursor is the cursor of the page after list, or "" when list did
// not fill its limit and so is the last page. A full page may be the last
// too: the page after it is then empty, and carries no cursor. Asking the
// store for one row more to tell would read a row more for every page.
func nextCursor[T any, ID int64 | string](list []T, limit int, newest bool, at func(T) domain.ListPosition[ID]) string {
	if len(list) == 0 || len(list) < limit {
		return ""
	}
	p := at(list[len(list)-1])
	// Strings and an integer: the encoding cannot fail.
	b, _ := json.Marshal(cursor[ID]{Order: orderName(newest), CreatedAt: p.CreatedAt.UTC().Format(time.RFC3339Nano), ID: p.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

// afterParam reads after=, a cursor from the "next" of a listing read in
// the same order (newest first when newest): nil when absent.
func afterParam[ID int64 | string](r *http.Request, newest bool) (*domain.ListPosition[ID], error) {
	q := r.URL.Query()
	if !q.Has("after") {
		return nil, nil
	}
	const notOurs = `bad after: not a cursor of this listing (pass the "next" of the answer before as it is)`
	raw, err := base64.RawURLEncoding.DecodeString(q.Get("after"))
	if err != nil {
		return nil, errors.New(notOurs)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var c cursor[ID]
	var zero ID
	if err := dec.Decode(&c); err != nil || dec.More() || c.ID == zero || (c.Order != "newest" && c.Order != "oldest") {
		return nil, errors.New(notOurs)
	}
	created, err := time.Parse(time.RFC3339Nano, c.CreatedAt)
	if err != nil || created.IsZero() || domain.CheckTime("created_at", created) != nil {
		return nil, errors.New(notOurs)
	}
	if want := orderName(newest); c.Order != want {
		return nil, fmt.Errorf("bad after: the cursor continues a listing %s first, and this one is %s first; "+
			"ask with the order the cursor came from, or start again without after", c.Order, want)
	}
	return &domain.ListPosition[ID]{CreatedAt: created.UTC(), ID: c.ID}, nil
}
