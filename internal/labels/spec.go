package labels

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// AdhocPrefix opens the class of a machine that no configured runner
// describes exactly.
const AdhocPrefix = "adhoc-"

// ColdSpec is the machine to start for the job: base (the pool's runner,
// the runner= spec, or the default runner) with the labels' overrides
// applied. Its Name is the request's Class for base.
func (r Request) ColdSpec(base domain.RunnerSpec) domain.RunnerSpec {
	spec := r.apply(base)
	spec.Name = r.class(base, spec)
	return spec
}

func (r Request) class(base, spec domain.RunnerSpec) string {
	if base.Name != "" && sameMachine(base, spec) {
		return base.Name
	}
	return AdhocPrefix + fingerprint(spec)
}

func (r Request) apply(base domain.RunnerSpec) domain.RunnerSpec {
	spec := base
	spec.Family = slices.Clone(base.Family)
	o := r.Spec
	if o.CPU != (domain.Range{}) {
		spec.CPU = o.CPU
	}
	if o.RAM != (domain.Range{}) {
		spec.RAM = o.RAM
	}
	if len(o.Family) > 0 {
		spec.Family = slices.Clone(o.Family)
	}
	if o.Image != "" {
		spec.Image = o.Image
	}
	if o.Spot != nil {
		spec.Spot = *o.Spot
	}
	if o.Volume != (domain.Volume{}) {
		spec.Volume = o.Volume
	}
	return spec
}

// canonical is the spec without its name and with its families as a set:
// the order families are listed in does not change which machines fit.
func canonical(s domain.RunnerSpec) domain.RunnerSpec {
	s.Name = ""
	s.Family = slices.Compact(slices.Sorted(slices.Values(s.Family)))
	return s
}

func sameMachine(a, b domain.RunnerSpec) bool {
	a, b = canonical(a), canonical(b)
	return a.Image == b.Image && a.CPU == b.CPU && a.RAM == b.RAM && a.Spot == b.Spot &&
		a.Volume == b.Volume && slices.Equal(a.Family, b.Family)
}

func fingerprint(s domain.RunnerSpec) string {
	b, err := json.Marshal(canonical(s))
	if err != nil {
		panic("labels: fingerprint: " + err.Error()) // a plain struct always marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
