package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	"github.com/bullpen-ci/bullpen/internal/history"
)

func init() {
	register("history", "export a repository's or organisation's past jobs, for capacity planning", cmdHistory)
}

func historyUsage(w io.Writer) {
	fmt.Fprint(w, `usage: bullpen history export (--repo OWNER/NAME | --org ORG) [--since 7d] [--out FILE]
       bullpen history generate (--config FILE [--environment NAME] | --pools NAME,NAME) [--jobs 2000] [--days 7] [--seed 1]

Reads the completed workflow jobs of the runs created since --since through
GitHub's REST API and writes one JSON line per job: its id, run, attempt,
repository, workflow, name, labels, when it was queued, started and
completed, its conclusion and its runner. A run's jobs are written once
all of them have completed. The token comes from $BULLPEN_GITHUB_TOKEN or
$GITHUB_TOKEN (never a flag). Rate limits are waited out. Run again with
the same --out to resume: the runs already in the file are not read again
(nor a re-run of one of them since), the runs that were still in progress
are.

generate writes a made-up history in the same format, to try simulate
without GitHub: weekday working hours busiest, one arrival in five a matrix
of 3 to 12 jobs, the first pool the busiest. With --config, the jobs ask for
the pools simulate --config serves (or those --pools names) and carry the
env= label its environment's stack takes, as real jobs must.

Run 'bullpen history export -h' or 'bullpen history generate -h' for their flags.
`)
}

func cmdHistory(ctx context.Context, e *env, args []string) int {
	return dispatch(ctx, e, "history", args, historyUsage, map[string]subcommand{"export": historyExport, "generate": historyGenerate})
}

func historyExport(ctx context.Context, e *env, args []string) int {
	fs := e.flags("history export")
	repo := fs.String("repo", "", "the repository, OWNER/NAME")
	org := fs.String("org", "", "every repository of this organisation, instead of --repo")
	sinceFlag := fs.String("since", "7d", "how far back: a duration (7d, 36h) or a date (2026-11-01, or RFC 3339)")
	out := fs.String("out", "", "the file to write (appended to, resuming, when it exists); default the standard output")
	url := fs.String("github-url", e.getenv("BULLPEN_GITHUB_URL"), "the API root, for GitHub Enterprise Server https://HOST/api/v3/")
	progress := fs.Bool("progress", false, "report progress on the standard error (always on a terminal)")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	fail := func(err error) int {
		fmt.Fprintln(e.stderr, "bullpen history export:", err)
		return 2
	}
	now := time.Now()
	since, err := parseSince(*sinceFlag, now)
	if err != nil {
		return fail(err)
	}
	if (*repo == "") == (*org == "") {
		return fail(errors.New("give --repo OWNER/NAME or --org ORG (one of them)"))
	}
	if owner, name, ok := strings.Cut(*repo, "/"); *repo != "" && (!ok || owner == "" || name == "" || strings.Contains(name, "/")) {
		return fail(fmt.Errorf("--repo %q: want OWNER/NAME", *repo))
	}
	token := or(e.getenv("BULLPEN_GITHUB_TOKEN"), e.getenv("GITHUB_TOKEN"))
	if token == "" {
		return fail(errors.New("no token: set $BULLPEN_GITHUB_TOKEN or $GITHUB_TOKEN (a token that may read the repositories' Actions)"))
	}
	client, err := rest.New(rest.Options{BaseURL: *url, Token: token, Clock: clock.Real{}})
	if err != nil {
		return fail(err)
	}
	w, have, closeOut, err := openHistoryOut(*out, e.stdout)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen history export:", err)
		return 1 // the file, not the command line, is wrong
	}
	defer closeOut()
	x := &history.Export{Source: client, Clock: clock.Real{}, Since: since, Out: w, Have: have}
	if *progress || isTerminal(e.stderr) {
		x.OnProgress = func(p history.Progress) { printExportProgress(e.stderr, p) }
	}
	var p history.Progress
	if *org != "" {
		p, err = x.Org(ctx, *org)
	} else {
		p, err = x.Repos(ctx, []string{*repo})
	}
	fmt.Fprintf(e.stderr, "%d repositories, %d runs (%d already exported, not read again; %d in progress, left for a later export), "+
		"%d jobs: %d written, %d already in the file, %d of runs in progress, %d not written (a history cannot hold them); %d rate-limit waits\n",
		p.ReposDone, p.Runs, p.Skipped, p.Unfinished, p.Jobs, p.Written, p.Known, p.Open, p.Refused, p.RateLimitWaits)
	if p.Refused > 0 {
		fmt.Fprintln(e.stderr, "bullpen history export: the last job not written:", p.Refusal)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen history export:", err)
		return 1
	}
	return 0
}

// openHistoryOut opens the export's file for appending, with the jobs it
// already holds; a file with a bad line is refused, naming the line,
// rather than appended to.
func openHistoryOut(path string, stdout io.Writer) (io.Writer, []history.Job, func(), error) {
	if path == "" {
		return stdout, nil, func() {}, nil
	}
	var have []history.Job
	if f, err := os.Open(path); err == nil {
		var rerr error
		have, rerr = history.Read(path, f)
		f.Close()
		if rerr != nil {
			return nil, nil, nil, fmt.Errorf("%w (resuming appends to this file: fix or move it)", rerr)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	return f, have, func() { f.Close() }, nil
}

// parseSince reads --since: a number of days or hours back (7d, 36h, or
// any Go duration), or a date.
func parseSince(v string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			if t.After(now) {
				return time.Time{}, fmt.Errorf("--since %q is in the future", v)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration back (7d, 36h) or a date (2026-11-01)", v)
}

func printExportProgress(w io.Writer, p history.Progress) {
	if !p.WaitingUntil.IsZero() {
		fmt.Fprintf(w, "rate limited: waiting until %s to %s\n", p.WaitingUntil.Format(time.TimeOnly), p.WaitingFor)
		return
	}
	fmt.Fprintf(w, "\r%s: repositories %d/%d, runs %d, jobs %d written", p.Repo, p.ReposDone, p.Repos, p.Runs, p.Written)
	if p.ReposDone == p.Repos {
		fmt.Fprintln(w)
	}
}

// isTerminal reports whether w is a character device (a terminal), where
// progress lines help; a pipe or a file gets only the summary.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
