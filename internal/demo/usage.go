package demo

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// InstanceHours is how long instances of one type and purchase option
// spent in one kind of state, summed over a run.
type InstanceHours struct {
	Type   string  `json:"instance_type"`
	Option string  `json:"purchase_option"` // on-demand or spot
	State  string  `json:"state"`           // hot-idle, busy, warming, stopped, other
	Hours  float64 `json:"hours"`
	// VolumeGBHours is the root volumes' size times the hours: EBS bills
	// a volume whatever its instance's state.
	VolumeGBHours float64 `json:"volume_gb_hours"`
}

// usageState is the kind of state billing tells apart.
func usageState(s domain.State) string {
	switch s {
	case domain.StateReady:
		return "hot-idle"
	case domain.StateClaimed, domain.StateRunning, domain.StateReleasing:
		return "busy"
	case domain.StatePending, domain.StateBooting, domain.StateStopping:
		return "warming"
	case domain.StateStopped:
		return "stopped"
	}
	return "other"
}

// usage samples the live instances every converger cycle and adds each
// one's interval to its type, option and state: a sampled integral, as
// fine as the cycle.
type usage struct {
	// from is when billing begins (zero: at the first sample); last the
	// previous sample.
	from  time.Time
	last  time.Time
	hours map[[3]string]*InstanceHours
}

// billed are the states of instances that have, or may have, a machine:
// terminated rows pile up over a long run and bill nothing.
var billed = slices.DeleteFunc(slices.Clone(domain.States), func(s domain.State) bool { return s == domain.StateTerminated })

func (u *usage) sample(ctx context.Context, st interface {
	ListInstances(context.Context, domain.InstanceFilter) ([]domain.Instance, error)
}, runners func(string) (domain.RunnerSpec, bool), now time.Time) {
	if u.last.IsZero() {
		u.last = now
		return
	}
	// Of the time since the last sample, only what comes after from is
	// billed; before it, the instances are still read for their roles.
	from := u.last
	if u.from.After(from) {
		from = u.from
	}
	step := max(now.Sub(from), 0).Hours()
	u.last = now
	rows, err := st.ListInstances(ctx, domain.InstanceFilter{States: billed})
	if err != nil {
		return
	}
	if u.hours == nil {
		u.hours = map[[3]string]*InstanceHours{}
	}
	for _, in := range rows {
		if in.State == domain.StateTerminated || in.InstanceType == "" || step == 0 {
			continue // no machine (yet, or any more), or not billed yet
		}
		option := in.UsageClass
		if option == "" {
			option = "on-demand"
		}
		key := [3]string{in.InstanceType, option, usageState(in.State)}
		h := u.hours[key]
		if h == nil {
			h = &InstanceHours{Type: key[0], Option: key[1], State: key[2]}
			u.hours[key] = h
		}
		h.Hours += step
		if r, ok := runners(in.Runner); ok {
			h.VolumeGBHours += step * float64(r.Volume.SizeGB)
		}
	}
}

// list is the sums, in a stable order.
func (u *usage) list() []InstanceHours {
	out := make([]InstanceHours, 0, len(u.hours))
	for _, h := range u.hours {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b InstanceHours) int {
		return strings.Compare(a.Type+a.Option+a.State, b.Type+b.Option+b.State)
	})
	return out
}
