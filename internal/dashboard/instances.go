package dashboard

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Limits of the instances page's lists; the matrix counts every row.
const (
	maxInstanceRows = 200
	maxEndedRows    = 100
)

// poolRow is one line of the pool × state matrix.
type poolRow struct {
	Pool   string // "" for instances launched for jobs outside pools
	Counts []int  // in liveStates order
	Total  int
}

type instancesView struct {
	Pool, State, ID string // filters
	States          []domain.State
	Matrix          []poolRow
	Rows            []domain.Instance
	More            int
	Ended           []domain.Instance
	MoreEnded       int
	Chart           svgChart
}

// liveStates are the states of the matrix: every one but terminated.
var liveStates = slices.DeleteFunc(slices.Clone(domain.States), func(s domain.State) bool { return s == domain.StateTerminated })

func (d *Dashboard) instancesPage(r *http.Request, s *snapshot) (pageResult, error) {
	q := r.URL.Query()
	v := instancesView{Pool: q.Get("pool"), State: q.Get("state"), ID: q.Get("id"), States: liveStates}
	v.Matrix = matrix(s.instances)
	keep := func(in domain.Instance) bool {
		return (v.ID == "" || in.ID == v.ID) && (v.Pool == "" || in.Pool == v.Pool || (v.Pool == "-" && in.Pool == "")) &&
			(v.State == "" || string(in.State) == v.State)
	}
	var live, ended []domain.Instance
	for _, in := range s.instances {
		switch {
		case !keep(in):
		case in.State == domain.StateTerminated:
			ended = append(ended, in)
		default:
			live = append(live, in)
		}
	}
	// Sorted before the cut, so that the rows that need a look are never
	// the ones left out.
	slices.SortStableFunc(live, func(a, b domain.Instance) int {
		return cmp.Or(cmp.Compare(attention(a.State), attention(b.State)),
			cmp.Compare(a.Pool, b.Pool), cmp.Compare(stateOrder(a.State), stateOrder(b.State)))
	})
	v.More = max(len(live)-maxInstanceRows, 0)
	v.Rows = live[:min(len(live), maxInstanceRows)]
	slices.SortFunc(ended, func(a, b domain.Instance) int { return b.StateSince.Compare(a.StateSince) })
	v.MoreEnded = max(len(ended)-maxEndedRows, 0)
	v.Ended = ended[:min(len(ended), maxEndedRows)]
	v.Chart = historyChart(d.cache.history.list(), d.opts.Clock.Now())
	return pageResult{Title: "Instances", Data: v, Live: true}, nil
}

// matrix counts live instances by pool and state; pools in name order,
// instances outside pools last.
func matrix(insts []domain.Instance) []poolRow {
	rows := map[string]*poolRow{}
	for _, in := range insts {
		k := stateOrder(in.State)
		if in.State == domain.StateTerminated || k < 0 {
			continue
		}
		row := rows[in.Pool]
		if row == nil {
			row = &poolRow{Pool: in.Pool, Counts: make([]int, len(liveStates))}
			rows[in.Pool] = row
		}
		row.Counts[k]++
		row.Total++
	}
	out := make([]poolRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b poolRow) int {
		if (a.Pool == "") != (b.Pool == "") {
			return cmp.Compare(b.Pool, a.Pool) // "" last
		}
		return cmp.Compare(a.Pool, b.Pool)
	})
	return out
}

func stateOrder(s domain.State) int { return slices.Index(liveStates, s) }

// attention puts first the instances that need a look: in error, then
// terminating.
func attention(s domain.State) int {
	switch s {
	case domain.StateError:
		return 0
	case domain.StateTerminating:
		return 1
	}
	return 2
}
