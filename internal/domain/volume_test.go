package domain

import (
	"slices"
	"strings"
	"testing"
)

func TestParseVolume(t *testing.T) {
	cases := []struct {
		in       string
		want     Volume
		problems []string
	}{
		{"gp3:30gb", Volume{Type: "gp3", SizeGB: 30}, nil},
		{"IO2:100GB:4000IOPS:250MBPS", Volume{Type: "io2", SizeGB: 100, ThroughputMBps: 250, IOPS: 4000}, nil},
		{"gp3:1048576gb", Volume{Type: "gp3", SizeGB: MaxVolumeNumber}, nil},
		{"gp3", Volume{}, []string{"expected " + VolumeForm}},
		{"gp3:1gb:1mbps:1iops:x", Volume{}, []string{"expected " + VolumeForm}},
		{"gp3:1048577gb", Volume{}, []string{`size "1048577gb" is not a size such as 30gb (at most 1048576gb)`}},
		{"gp3:99999999999999999999999gb", Volume{}, []string{`size "99999999999999999999999gb" is not a size such as 30gb (at most 1048576gb)`}},
		{"gp3:-1gb", Volume{}, []string{`size "-1gb" is not a size such as 30gb (at most 1048576gb)`}},
		{"gp9:big:1mbps:2mbps", Volume{}, []string{
			`type "gp9" is not one of gp2, gp3, io1, io2, st1, sc1, standard`,
			`size "big" is not a size such as 30gb (at most 1048576gb)`,
			`part "2mbps" is not one throughput such as 125mbps and one IOPS such as 3000iops`,
		}},
	}
	for _, c := range cases {
		got, problems := ParseVolume(c.in)
		if got != c.want || !slices.Equal(problems, c.problems) {
			t.Errorf("ParseVolume(%q) = %+v, %q; want %+v, %q", c.in, got, problems, c.want, c.problems)
		}
	}
}

// A part of a hostile label is quoted cut short.
func TestParseVolumeCutsALongPartShort(t *testing.T) {
	_, problems := ParseVolume("gp3:" + strings.Repeat("9", 10_000) + "gb")
	if len(problems) != 1 || len(problems[0]) > 200 || !strings.Contains(problems[0], "…") {
		t.Fatalf("problems %q: want one, cut short", problems)
	}
}
