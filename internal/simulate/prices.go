package simulate

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
)

//go:embed prices.json
var defaultPrices []byte

// Prices is a price table: compute by instance type and purchase option,
// and root volumes.
type Prices struct {
	Region string `json:"region"`
	Date   string `json:"date"`
	Note   string `json:"note,omitempty"`
	// OnDemand is USD per hour by instance type.
	OnDemand map[string]float64 `json:"on_demand"`
	// SpotFraction is spot's price as a fraction of on-demand, by family.
	SpotFraction map[string]float64 `json:"spot_fraction"`
	// VolumeGBMonth is USD per GB-month of root volume.
	VolumeGBMonth float64 `json:"volume_gb_month"`
}

// DefaultPrices is the table shipped with bullpen (see prices.json).
func DefaultPrices() Prices {
	p, err := ParsePrices("prices.json", defaultPrices)
	if err != nil {
		panic(err) // the embedded table is checked by the tests
	}
	return p
}

// ParsePrices reads a price table (name is for errors).
func ParsePrices(name string, b []byte) (Prices, error) {
	var p Prices
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Prices{}, fmt.Errorf("%s: %w", name, err)
	}
	if len(p.OnDemand) == 0 {
		return Prices{}, fmt.Errorf("%s: no on_demand prices", name)
	}
	for t, v := range p.OnDemand {
		if v <= 0 {
			return Prices{}, fmt.Errorf("%s: on_demand %s: %v is not a positive price", name, t, v)
		}
	}
	for f, v := range p.SpotFraction {
		if v <= 0 || v > 1 {
			return Prices{}, fmt.Errorf("%s: spot_fraction %s: %v is not in (0, 1]", name, f, v)
		}
	}
	return p, nil
}

// hourly is the price of an hour of itype bought as option.
func (p Prices) hourly(itype, option string) (float64, bool) {
	od, ok := p.OnDemand[itype]
	if !ok || option != "spot" {
		return od, ok
	}
	family, _, _ := strings.Cut(itype, ".")
	f, ok := p.SpotFraction[family]
	return od * f, ok
}

// Covers names the instance types the configuration's runners launch (as
// the simulated cloud picks them) that the table has no price for, and
// the runners no type fits.
func (p Prices) Covers(cfg *config.Config) error {
	var missing, unfit []string
	for name, r := range cfg.Runners {
		option := "on-demand"
		if r.Spot != "" {
			option = "spot"
		}
		t, err := sim.InstanceType(r)
		if err != nil {
			unfit = append(unfit, fmt.Sprintf("runner %s: %v", name, err))
			continue
		}
		if !p.has(t, option) {
			missing = append(missing, fmt.Sprintf("%s (%s, runner %s)", t, option, name))
		}
	}
	slices.Sort(unfit)
	slices.Sort(missing)
	var problems []error
	for _, u := range unfit {
		problems = append(problems, errors.New(u))
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Errorf("the price table (%s, %s) has no price for %s", p.Region, p.Date, strings.Join(missing, ", ")))
	}
	return errors.Join(problems...)
}

func (p Prices) has(itype, option string) bool {
	_, ok := p.hourly(itype, option)
	return ok
}

// Bill is the estimated cost of a replay.
type Bill struct {
	// Compute is USD by instance type and option ("t3.large on-demand").
	Compute    map[string]float64 `json:"compute_usd"`
	Volumes    float64            `json:"volumes_usd"`
	Total      float64            `json:"total_usd"`
	PerJob     float64            `json:"per_job_usd"`
	HotIdle    float64            `json:"hot_idle_usd"` // what idle hot instances cost
	Unpriced   []string           `json:"unpriced,omitempty"`
	PriceTable string             `json:"price_table"`
}

// bill prices instance-hours: compute for every state but stopped,
// volumes for every state.
func (p Prices) bill(hours []demo.InstanceHours, jobs int) Bill {
	b := Bill{Compute: map[string]float64{}, PriceTable: p.Region + " " + p.Date}
	unpriced := map[string]bool{}
	for _, h := range hours {
		b.Volumes += h.VolumeGBHours / (730) * p.VolumeGBMonth
		if h.State == "stopped" {
			continue
		}
		rate, ok := p.hourly(h.Type, h.Option)
		if !ok {
			unpriced[h.Type+" "+h.Option] = true
			continue
		}
		b.Compute[h.Type+" "+h.Option] += rate * h.Hours
		if h.State == "hot-idle" {
			b.HotIdle += rate * h.Hours
		}
	}
	for _, v := range b.Compute {
		b.Total += v
	}
	b.Total += b.Volumes
	if jobs > 0 {
		b.PerJob = b.Total / float64(jobs)
	}
	for k := range unpriced {
		b.Unpriced = append(b.Unpriced, k)
	}
	slices.Sort(b.Unpriced)
	return b
}
