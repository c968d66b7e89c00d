package main

import (
	"bufio"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// documentedMetric is one row of README's metrics table.
type documentedMetric struct {
	kind   string   // counter, gauge or histogram
	labels []string // the label names, sorted
}

// servedFamily is one metric family as /metrics serves it.
type servedFamily struct {
	kind   string
	labels []string // the label names of its series, sorted
}

// notServeMetrics are names the code holds that are not metrics of
// `bullpen serve`, so README's table leaves them out.
var notServeMetrics = map[string]string{
	"bullpen_session": "the dashboard's session cookie",
}

// notServePrefix: the App Platform autoscaler's metrics are registered by
// `bullpen autoscale run`, never by serve.
const notServePrefix = "bullpen_appplatform_"

// README's metrics table documents every metric serve registers, with the
// type and labels it is served with, and nothing else: a new metric, or one
// renamed or removed, fails here until the table says so.
func TestReadmeDocumentsEveryMetric(t *testing.T) {
	doc := readmeMetrics(t, "../../README.md")
	known := metricNames(t)
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		if !known[name] {
			t.Errorf("README's metrics table documents %s, which no code registers", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(known)) {
		if _, ok := doc[name]; !ok && notServeMetrics[name] == "" && !strings.HasPrefix(name, notServePrefix) {
			t.Errorf("%s is in the code but not in README's metrics table", name)
		}
	}
	served := scrapeMetrics(t, "http://"+startServe(t).addr+"/metrics")
	if len(served) == 0 {
		t.Fatal("serve's /metrics served no metric")
	}
	for _, name := range slices.Sorted(maps.Keys(served)) {
		got, want := served[name], doc[name]
		switch {
		case want.kind == "":
			t.Errorf("serve exports %s, which README's metrics table does not document", name)
		case got.kind != want.kind:
			t.Errorf("%s is served as a %s, README's metrics table says %s", name, got.kind, want.kind)
		case !slices.Equal(got.labels, want.labels):
			t.Errorf("%s is served with labels %v, README's metrics table says %v", name, got.labels, want.labels)
		}
	}
}

var (
	metricRow  = regexp.MustCompile("^`(bullpen_[a-z0-9_]+)`$")
	groupRow   = regexp.MustCompile(`^\*\*[^*]+\*\*`)
	labelName  = regexp.MustCompile("`([a-z_]+)`")
	metricKind = map[string]bool{"counter": true, "gauge": true, "histogram": true}
)

// readmeMetrics reads the table of the README's "### Metrics" section:
// | metric | type | labels | what it counts |, where a row whose first
// cell is in bold names a group of the rows below it, and a metric's
// labels are the names in backquotes in its labels cell.
func readmeMetrics(t *testing.T, path string) map[string]documentedMetric {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(b), "\n### Metrics\n")
	if !found {
		t.Fatalf("%s has no ### Metrics section", path)
	}
	doc := map[string]documentedMetric{}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "#") {
			break // the next section
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| metric |") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 4 {
			t.Errorf("metrics table row %q has %d cells, want 4", line, len(cells))
			continue
		}
		if groupRow.MatchString(cells[0]) && cells[1]+cells[2]+cells[3] == "" {
			continue
		}
		m := metricRow.FindStringSubmatch(cells[0])
		switch {
		case m == nil:
			t.Errorf("metrics table row %q names no metric in backquotes, nor a group in bold", line)
		case !metricKind[cells[1]]:
			t.Errorf("metrics table: %s is of type %q, want counter, gauge or histogram", m[1], cells[1])
		case doc[m[1]].kind != "":
			t.Errorf("metrics table: %s has two rows", m[1])
		default:
			var labels []string
			for _, l := range labelName.FindAllStringSubmatch(cells[2], -1) {
				labels = append(labels, l[1])
			}
			slices.Sort(labels)
			doc[m[1]] = documentedMetric{kind: cells[1], labels: labels}
		}
	}
	if len(doc) == 0 {
		t.Fatalf("%s: the ### Metrics section has no table of metrics", path)
	}
	return doc
}

var (
	typeLine  = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// scrapeMetrics reads the metric families served at url, in Prometheus's
// text format: each family's TYPE line, then its samples.
func scrapeMetrics(t *testing.T, url string) map[string]servedFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	served := map[string]servedFamily{}
	family := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if m := typeLine.FindStringSubmatch(line); m != nil {
			family = m[1]
			served[family] = servedFamily{kind: m[2]}
			continue
		}
		_, labels, ok := strings.Cut(line, "{")
		if family == "" || strings.HasPrefix(line, "#") || !ok {
			continue
		}
		labels, _, _ = strings.Cut(labels, "} ")
		f := served[family]
		for _, pair := range labelPair.FindAllStringSubmatch(labels, -1) {
			if name := pair[1]; name != "le" && !slices.Contains(f.labels, name) {
				f.labels = append(f.labels, name)
			}
		}
		slices.Sort(f.labels)
		served[family] = f
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return served
}
