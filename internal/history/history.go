// Package history is a team's past workflow jobs as JSON lines: written by
// `bullpen history export` from GitHub's REST API, read by the capacity
// planner, which replays them against a pool configuration.
package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Job is one line: a workflow job as GitHub recorded it.
type Job struct {
	// ID is GitHub's job id, unique across the export.
	ID int64 `json:"id"`
	// RunID and RunAttempt are the workflow run and its attempt (a re-run
	// makes new jobs under the next attempt).
	RunID      int64 `json:"run_id"`
	RunAttempt int   `json:"run_attempt"`
	// Repo is owner/name.
	Repo     string `json:"repository"`
	Workflow string `json:"workflow"`
	Name     string `json:"name"`
	// Labels are the job's runs-on labels.
	Labels []string `json:"labels"`
	// Created is when the job was queued.
	Created time.Time `json:"created_at"`
	// Started is when a runner took it; absent when none did (cancelled
	// while queued).
	Started *time.Time `json:"started_at,omitempty"`
	// Completed is when it ended; absent while it runs.
	Completed *time.Time `json:"completed_at,omitempty"`
	// Conclusion is GitHub's: success, failure, cancelled, skipped, …
	Conclusion string `json:"conclusion,omitempty"`
	// RunnerName and RunnerGroup are where it ran, if it did.
	RunnerName  string `json:"runner_name,omitempty"`
	RunnerGroup string `json:"runner_group,omitempty"`
}

// QueueTime is how long the job waited for a runner; false when it never
// got one.
func (j Job) QueueTime() (time.Duration, bool) {
	if j.Started == nil {
		return 0, false
	}
	return j.Started.Sub(j.Created), true
}

// ClockSkew is how far before its created_at a job's started_at may be
// and still be taken for the same instant: GitHub stamps the two in
// different services, to the second, whose clocks disagree by a second or
// two, so a job a runner took at once can start "before" it was queued.
// Five seconds covers that with room; a larger gap is a broken record,
// refused.
const ClockSkew = 5 * time.Second

// neverRan says whether the record shows that no runner took the job:
// skipped by its workflow, or cancelled while queued, with no started_at
// (the export writes one only for a job a runner took). A replay does not
// queue it.
func (j Job) neverRan() bool {
	return j.Started == nil && (j.Conclusion == "skipped" || j.Conclusion == "cancelled")
}

// settle moves a started_at within ClockSkew before created_at to
// created_at (and a completed_at it then precedes to it), so that the
// queue time is never negative; Check then refuses any larger gap.
func (j *Job) settle() {
	if j.Started == nil || !j.Started.Before(j.Created) || j.Created.Sub(*j.Started) > ClockSkew {
		return
	}
	started := j.Created
	j.Started = &started
	if j.Completed != nil && j.Completed.Before(started) {
		completed := started
		j.Completed = &completed
	}
}

// Check names what makes j unusable for a replay. A job that never ran
// may have no labels: GitHub evaluates runs-on only for a job it queues
// for a runner, and a replay skips it anyway.
func (j Job) Check() error {
	var problems []string
	if j.ID <= 0 {
		problems = append(problems, "no job id")
	}
	if owner, name, ok := strings.Cut(j.Repo, "/"); !ok || owner == "" || name == "" {
		problems = append(problems, fmt.Sprintf("repository %q is not owner/name", j.Repo))
	}
	if len(j.Labels) == 0 && !j.neverRan() {
		problems = append(problems, "no labels")
	}
	if j.Created.IsZero() {
		problems = append(problems, "no created_at")
	}
	if j.Started != nil && j.Created.Sub(*j.Started) > ClockSkew {
		problems = append(problems, fmt.Sprintf("started_at before created_at by %s (more than the %s of clock skew taken)",
			j.Created.Sub(*j.Started), ClockSkew))
	}
	if j.Completed != nil && j.Started != nil && j.Completed.Before(*j.Started) {
		problems = append(problems, "completed_at before started_at")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Usable is j as a history file holds it: settled (see ClockSkew) and
// checked. Read and the export apply it alike, so that the export never
// writes a line Read refuses.
func (j Job) Usable() (Job, error) {
	j.settle()
	return j, j.Check()
}

// LineError is a line of a history file that is not a usable job.
type LineError struct {
	Name string // the file, as given to Read
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.Name, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// shownLineErrors is how many bad lines Read names: a file of some other
// shape is bad on every line, and thousands of the same error bury the
// one thing to do about it.
const shownLineErrors = 10

// Contents is what a history file holds.
type Contents struct {
	Jobs []Job
	// Duplicates counts the lines dropped for repeating an earlier
	// line's job exactly.
	Duplicates int
}

// Read reads the jobs of a history file; see ReadContents.
func Read(name string, r io.Reader) ([]Job, error) {
	c, err := ReadContents(name, r)
	return c.Jobs, err
}

// ReadContents reads every line of a history file (name is for errors)
// and checks each (Job.Usable); blank lines are skipped. The first
// shownLineErrors bad lines are reported, each with its number, then how
// many more there are.
//
// A job id is GitHub's and unique, so a second line with the same id is
// the same job twice, which a replay would queue twice. A line the same as
// the earlier one is dropped, and counted: two overlapping exports of the
// same runs, concatenated, hold each shared job as the same line (a run is
// written only once complete, so its record no longer changes), and the
// one wanted is plain. Two lines that differ are refused, both named: which
// one is right cannot be told.
func ReadContents(name string, r io.Reader) (Contents, error) {
	var c Contents
	var errs []error
	bad := 0
	fail := func(err error) {
		if bad++; bad <= shownLineErrors {
			errs = append(errs, err)
		}
	}
	gitHubShaped := false
	type firstSeen struct {
		line int
		as   []byte
	}
	seen := map[int64]firstSeen{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var j Job
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			gitHubShaped = gitHubShaped || looksLikeGitHubJobs(line)
			fail(&LineError{Name: name, Line: n, Err: fmt.Errorf("not a job: %w", err)})
			continue
		}
		j, err := j.Usable()
		if err != nil {
			fail(&LineError{Name: name, Line: n, Err: err})
			continue
		}
		as, err := json.Marshal(j)
		if err != nil {
			fail(&LineError{Name: name, Line: n, Err: err})
			continue
		}
		if first, ok := seen[j.ID]; ok {
			if !bytes.Equal(first.as, as) {
				fail(&LineError{Name: name, Line: n, Err: fmt.Errorf("job %d again, unlike line %d: one job, two records", j.ID, first.line)})
			} else {
				c.Duplicates++
			}
			continue
		}
		seen[j.ID] = firstSeen{n, as}
		c.Jobs = append(c.Jobs, j)
	}
	if bad > shownLineErrors {
		errs = append(errs, fmt.Errorf("%s: %d more bad lines", name, bad-shownLineErrors))
	}
	if gitHubShaped {
		errs = append([]error{fmt.Errorf("%s holds GitHub's own workflow job objects, not a history: "+
			"`bullpen history export` reads them from GitHub and writes the lines this takes", name)}, errs...)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return c, errors.Join(errs...)
}

// looksLikeGitHubJobs says whether a line is a job as GitHub's REST API
// returns it, or a page of them: fields a history line never has, and no
// repository (GitHub names it only in URLs).
func looksLikeGitHubJobs(line string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &fields) != nil {
		return false
	}
	if _, ok := fields["repository"]; ok {
		return false
	}
	for _, k := range []string{"workflow_name", "head_sha", "run_url", "check_run_url", "steps"} {
		if _, ok := fields[k]; ok {
			return true
		}
	}
	_, jobs := fields["jobs"]
	_, total := fields["total_count"]
	return jobs && total
}
