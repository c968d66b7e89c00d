package dashboard

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
)

// ConfigStatus is the configuration in force and how the last reload went.
type ConfigStatus struct {
	Path     string
	Source   []byte    // the file in force
	LoadedAt time.Time // when it was loaded
	Warnings []Problem // of the file in force
	// Refused is the last reload that failed, when no reload has
	// succeeded since; nil otherwise.
	Refused *Refusal
}

// Refusal is a reload that kept the configuration in force.
type Refusal struct {
	At       time.Time
	Problems []Problem
	Source   []byte // the file that was refused; nil when it could not be read
}

// Unreadable reports a reload that failed to read the file, rather than
// one that read a file that does not validate (an empty one among them).
func (r *Refusal) Unreadable() bool { return r.Source == nil }

// Problem is one message about a configuration file; Line is 0 when the
// message is not about a line.
type Problem struct {
	Line, Col int
	Msg       string
}

// ConfigRecorder keeps the ConfigStatus as the composition root loads and
// reloads the file. Its methods are safe for concurrent use.
type ConfigRecorder struct {
	mu sync.Mutex
	st ConfigStatus
}

// Loaded records that data, parsed as cfg, is now in force.
func (r *ConfigRecorder) Loaded(path string, data []byte, cfg *config.Config, at time.Time) {
	st := ConfigStatus{Path: path, Source: slices.Clone(data), LoadedAt: at}
	if cfg != nil {
		st.Warnings = problems(cfg.Warnings)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st = st
}

// Refused records a reload that failed with err; data is the file read
// (nil when it could not be read).
func (r *ConfigRecorder) Refused(path string, data []byte, err error, at time.Time) {
	ref := &Refusal{At: at, Source: slices.Clone(data)}
	var errs config.Errors
	if errors.As(err, &errs) {
		ref.Problems = problems(errs)
	} else {
		ref.Problems = []Problem{{Msg: err.Error()}}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.Path == "" {
		r.st.Path = path
	}
	r.st.Refused = ref
}

// Status returns the configuration in force and the last refusal.
func (r *ConfigRecorder) Status() ConfigStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func problems(errs config.Errors) []Problem {
	out := make([]Problem, len(errs))
	for k, e := range errs {
		out[k] = Problem{Line: e.Line, Col: e.Col, Msg: e.Msg}
	}
	return out
}

// sourceLine is one numbered line of a file, marked when a problem names it.
type sourceLine struct {
	N      int
	Text   string
	Marked bool
}

type configView struct {
	Known       bool
	Status      ConfigStatus
	Lines       []sourceLine
	Refused     []refusedProblem
	Pools       []string // one summary line per pool in force
	Environment string
	// TextHidden: the file's text is left out, for a viewer. A file may
	// hold scripts bullpen ignores (a RunsOn image's preinstall:), and
	// whatever they embed; what the file does is shown all the same.
	TextHidden bool
}

// refusedProblem is a problem of the refused file with the line it names.
type refusedProblem struct {
	Problem
	Text string
}

func (d *Dashboard) configPage(r *http.Request, s *snapshot) (pageResult, error) {
	v := configView{Environment: d.opts.Environment}
	if d.opts.Config != nil {
		v.Status = d.opts.Config()
		v.Known = v.Status.Path != "" || v.Status.Source != nil
	}
	v.TextHidden = roleOf(r.Context()) != roleAdmin
	marked := map[int]bool{}
	for _, p := range v.Status.Warnings {
		marked[p.Line] = true
	}
	if !v.TextHidden {
		v.Lines = numbered(v.Status.Source, marked)
	}
	if ref := v.Status.Refused; ref != nil {
		lines := numbered(ref.Source, nil)
		for _, p := range ref.Problems {
			rp := refusedProblem{Problem: p}
			if p.Line > 0 && p.Line <= len(lines) && !v.TextHidden {
				rp.Text = lines[p.Line-1].Text
			}
			v.Refused = append(v.Refused, rp)
		}
	}
	for _, p := range d.opts.Pools() {
		v.Pools = append(v.Pools, config.Summary(p))
	}
	return pageResult{Title: "Configuration", Data: v, Live: true}, nil
}

func numbered(src []byte, marked map[int]bool) []sourceLine {
	if len(src) == 0 {
		return nil
	}
	text := strings.Split(strings.TrimSuffix(string(bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))), "\n"), "\n")
	out := make([]sourceLine, len(text))
	for k, t := range text {
		out[k] = sourceLine{N: k + 1, Text: t, Marked: marked[k+1]}
	}
	return out
}
