package domain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// VolumeForm is the syntax of a machine's root volume, the same in the
// configuration's `volume:` and in a job's `volume=` label.
const VolumeForm = "TYPE:SIZEgb[:THROUGHPUTmbps][:IOPSiops], e.g. gp3:30gb:125mbps:3000iops"

// VolumeTypes are the EBS volume types a runner may ask for.
var VolumeTypes = []string{"gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"}

// MaxVolumeNumber bounds a volume's size, throughput and IOPS: EBS allows
// at most 64 TiB and 256,000 IOPS, so anything above is a mistake, and a
// bound keeps a hostile label from overflowing.
const MaxVolumeNumber = 1 << 20

// ParseVolume reads s in VolumeForm, in any case. Type and size are
// required; throughput and IOPS follow in either order, told apart by
// their suffix, each at most once. It returns every problem it finds, each
// naming the part at fault, for the caller to put in context: a
// configuration reports them all, a label the first.
func ParseVolume(s string) (Volume, []string) {
	parts := strings.Split(strings.ToLower(s), ":")
	if len(parts) < 2 || len(parts) > 4 {
		return Volume{}, []string{"expected " + VolumeForm}
	}
	var v Volume
	var problems []string
	if slices.Contains(VolumeTypes, parts[0]) {
		v.Type = parts[0]
	} else {
		problems = append(problems, fmt.Sprintf("type %s is not one of %s", QuoteShort(parts[0]), strings.Join(VolumeTypes, ", ")))
	}
	if size, ok := suffixed(parts[1], "gb"); ok {
		v.SizeGB = size
	} else {
		problems = append(problems, fmt.Sprintf("size %s is not a size such as 30gb (at most %dgb)", QuoteShort(parts[1]), MaxVolumeNumber))
	}
	for _, part := range parts[2:] {
		if x, ok := suffixed(part, "mbps"); ok && v.ThroughputMBps == 0 {
			v.ThroughputMBps = x
		} else if x, ok := suffixed(part, "iops"); ok && v.IOPS == 0 {
			v.IOPS = x
		} else {
			problems = append(problems, fmt.Sprintf("part %s is not one throughput such as 125mbps and one IOPS such as 3000iops", QuoteShort(part)))
		}
	}
	if problems != nil {
		return Volume{}, problems
	}
	return v, nil
}

// suffixed reads a number from 1 to MaxVolumeNumber followed by suffix:
// "30gb".
func suffixed(s, suffix string) (int, bool) {
	digits, ok := strings.CutSuffix(s, suffix)
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	x, err := strconv.ParseUint(digits, 10, 64)
	return int(x), err == nil && x >= 1 && x <= MaxVolumeNumber
}

// QuoteShort quotes s for a message, cut short so that a huge value from
// outside (a job's label) cannot flood a log line or a stored reason.
func QuoteShort(s string) string {
	const limit = 100
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
