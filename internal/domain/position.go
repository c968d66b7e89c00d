package domain

import (
	"cmp"
	"time"
)

// ListPosition is a row's place in the order listings share: by CreatedAt,
// then by ID. A filter's After starts a listing past it, so that a long
// listing is read page by page. Being a key rather than a count of rows
// read, it holds while rows are created or deleted between pages: no page
// repeats a row, and a row that was there all along is not skipped.
type ListPosition[ID int64 | string] struct {
	CreatedAt time.Time
	ID        ID
}

// Passed reports whether a row created at created with id id comes after
// p in a listing that is newest first when newest, else oldest first. A
// nil p is the start of the listing, which every row comes after.
func (p *ListPosition[ID]) Passed(created time.Time, id ID, newest bool) bool {
	if p == nil {
		return true
	}
	c := cmp.Or(created.Compare(p.CreatedAt), cmp.Compare(id, p.ID))
	if newest {
		return c < 0
	}
	return c > 0
}

// Position is the job's place in a listing's order.
func (j Job) Position() ListPosition[int64] {
	return ListPosition[int64]{CreatedAt: j.CreatedAt, ID: j.ID}
}

// Position is the instance's place in a listing's order.
func (in Instance) Position() ListPosition[string] {
	return ListPosition[string]{CreatedAt: in.CreatedAt, ID: in.ID}
}
