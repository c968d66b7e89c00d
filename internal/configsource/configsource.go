// Package configsource reads the pool configuration from where the
// operator keeps it: a local file, or a file in a GitHub repository
// (github://OWNER/REPO/PATH, RunsOn's place being
// OWNER/.github-private/.github/runs-on.yml), read with conditional
// requests so an unchanged file costs GitHub nothing.
package configsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// Source is where the configuration is read from.
type Source interface {
	// Name says where, for logs and errors.
	Name() string
	// Read returns the file and whether it changed since the last Read
	// (the first Read is always a change).
	Read(ctx context.Context) (data []byte, changed bool, err error)
}

// Scheme marks a configuration in a GitHub repository.
const Scheme = "github://"

// Location is a file in a GitHub repository.
type Location struct {
	Owner, Repo, Path string
	Ref               string // branch, tag or commit; the default branch when empty
}

// String is the github:// form of the location.
func (l Location) String() string {
	s := Scheme + l.Owner + "/" + l.Repo + "/" + l.Path
	if l.Ref != "" {
		s += "@" + l.Ref
	}
	return s
}

// ParseLocation reads github://OWNER/REPO/PATH[@REF].
func ParseLocation(s string) (Location, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Location{}, fmt.Errorf("%q: not a %sOWNER/REPO/PATH location", s, Scheme)
	}
	rest, ref, _ := strings.Cut(rest, "@")
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.HasSuffix(parts[2], "/") {
		return Location{}, fmt.Errorf("%q: want %sOWNER/REPO/PATH, e.g. %sacme/.github-private/.github/runs-on.yml", s, Scheme, Scheme)
	}
	return Location{Owner: parts[0], Repo: parts[1], Path: parts[2], Ref: ref}, nil
}

// File is a local file. After the first read attempt its contents are
// handed over only once they have settled, since a file written in place
// (scp, cat >, an editor that does not rename) is for a moment cut short,
// and what it holds then may well validate. Until they settle, Read
// returns the contents it last handed over, unchanged, with an error that
// is ErrNotSettled. The first read attempt takes the file as it is: there
// is nothing in force to keep meanwhile, and a file being written as a
// control plane starts is rare, where one written just before it starts
// is the rule. Later attempts settle even when the first failed, as a
// control plane started on an earlier copy does have one in force.
type File struct {
	Path string
	// Clock dates the reads, and says how long ago the file was last
	// modified: the wall clock when nil, as the file system's times are.
	Clock domain.Clock
	last  []byte
	// handed: last holds contents handed over; tried: a read was
	// attempted, whatever its outcome.
	handed, tried bool
	// seen is the newer file as last observed, waiting to settle.
	seen *observation
}

// observation is the file as one read found it.
type observation struct {
	modTime time.Time
	size    int64
	data    []byte
	at      time.Time // by the File's clock
}

func (o *observation) sameFile(p *observation) bool {
	return o.modTime.Equal(p.modTime) && o.size == p.size && bytes.Equal(o.data, p.data)
}

// Settle is how long a file must have stayed as it is before File hands
// its contents over: longer than a write in progress pauses, and far
// shorter than the interval between reloads (30 s unless set).
const Settle = 2 * time.Second

// ErrNotSettled is a newer file than the one handed over that has not yet
// settled: it is neither unreadable nor refused, and a later read takes
// it once it stays as it is.
var ErrNotSettled = errors.New("a newer file waits to settle")

func (f *File) Name() string { return f.Path }

// Read hands over a newer file once it has settled, by either of two
// signs: it was last modified at least Settle ago by the File's clock, so
// a file edited before a read is taken at that read; or two reads at
// least Settle apart by the File's clock found the same modification
// time, size and bytes, which holds whatever the file system's clock
// says, so that a file dated ahead (a skewed clock on a file server, cp -p
// or tar from such a host) is still taken, a reload later.
func (f *File) Read(context.Context) ([]byte, bool, error) {
	if !f.tried {
		f.tried = true
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, false, err
		}
		f.last, f.handed = data, true
		return data, true, nil
	}
	o, stable, err := f.observe()
	switch {
	case err != nil:
		f.seen = nil
		return nil, false, err
	case !stable:
		f.seen = nil
		return f.last, false, f.notSettled(o)
	case f.handed && bytes.Equal(o.data, f.last):
		f.seen = nil
		return f.last, false, nil
	}
	if o.at.Sub(o.modTime) >= Settle || (f.seen != nil && f.seen.sameFile(o) && o.at.Sub(f.seen.at) >= Settle) {
		f.last, f.handed, f.seen = o.data, true, nil
		return o.data, true, nil
	}
	if f.seen == nil || !f.seen.sameFile(o) || o.at.Before(f.seen.at) {
		f.seen = o
	}
	return f.last, false, f.notSettled(o)
}

func (f *File) notSettled(o *observation) error {
	return fmt.Errorf("%s, modified at %s, %d bytes: %w", f.Path, o.modTime.UTC().Format(time.RFC3339Nano), o.size, ErrNotSettled)
}

// observe reads the file, and reports whether it stayed as it was while
// being read: the same modification time and size before and after, and
// the same bytes read twice, which also catches a write that keeps the
// modification time (a tool that restores it, a filesystem that keeps it
// coarsely).
func (f *File) observe() (*observation, bool, error) {
	before, err := os.Stat(f.Path)
	if err != nil {
		return nil, false, err
	}
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, false, err
	}
	again, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, false, err
	}
	after, err := os.Stat(f.Path)
	if err != nil {
		return nil, false, err
	}
	o := &observation{modTime: after.ModTime(), size: after.Size(), data: data, at: f.now()}
	same := bytes.Equal(data, again) && after.ModTime().Equal(before.ModTime()) && after.Size() == int64(len(data))
	return o, same, nil
}

func (f *File) now() time.Time {
	if f.Clock == nil {
		return time.Now()
	}
	return f.Clock.Now()
}

// ErrNotFound: the repository or the file does not exist, or the
// credentials cannot see them (GitHub answers 404 for both).
var ErrNotFound = errors.New("not found")

// RateLimitError is a read GitHub refused for its rate limit, not for want
// of permission. It wraps domain.ErrRateLimited.
type RateLimitError struct {
	Name   string // the location
	Status int
	Until  time.Time // when to read again
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%s: GitHub refused to read it for its rate limit (%d), not for want of permission: read it again after %s",
		e.Name, e.Status, e.Until.UTC().Format(time.RFC3339))
}

func (e *RateLimitError) Unwrap() error { return domain.ErrRateLimited }

// RetryAt is when to read again (domain.RetryAt).
func (e *RateLimitError) RetryAt() time.Time { return e.Until }

// GitHubFile is a file in a GitHub repository, read through the contents
// API with If-None-Match: a 304 answer means unchanged and costs no rate
// limit.
type GitHubFile struct {
	At      Location
	BaseURL string // the API root, ending in /
	// Client returns an HTTP client authenticated for the location's
	// owner (the App's installation there, or a token).
	Client func(ctx context.Context, owner string) (*http.Client, error)
	// Clock dates the end of a rate limit GitHub gives as a wait; the
	// wall clock when nil.
	Clock domain.Clock

	etag string
	last []byte
}

func (g *GitHubFile) Name() string { return g.At.String() }

func (g *GitHubFile) Read(ctx context.Context) ([]byte, bool, error) {
	hc, err := g.Client(ctx, g.At.Owner)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", g.Name(), err)
	}
	u := g.BaseURL + "repos/" + url.PathEscape(g.At.Owner) + "/" + url.PathEscape(g.At.Repo) + "/contents/" + escapePath(g.At.Path)
	if g.At.Ref != "" {
		u += "?ref=" + url.QueryEscape(g.At.Ref)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Accept", "application/vnd.github.raw+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if g.etag != "" {
		req.Header.Set("If-None-Match", g.etag)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", g.Name(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20+1))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", g.Name(), err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if len(body) > 1<<20 {
			return nil, false, fmt.Errorf("%s: larger than 1 MiB", g.Name())
		}
		changed := g.last == nil || !bytes.Equal(body, g.last)
		g.etag, g.last = resp.Header.Get("ETag"), body
		return body, changed, nil
	case http.StatusNotModified:
		return g.last, false, nil
	}
	if until, limited := rest.RateLimited(resp.StatusCode, resp.Header, string(body), g.now()); limited {
		return nil, false, &RateLimitError{Name: g.Name(), Status: resp.StatusCode, Until: until}
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, false, fmt.Errorf("%s: %w: the repository or the file does not exist, or the credentials cannot read it (a GitHub App needs contents: read and the repository among its installation's)", g.Name(), ErrNotFound)
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, false, fmt.Errorf("%s: GitHub refused to read it (%d): the credentials lack contents: read on %s/%s", g.Name(), resp.StatusCode, g.At.Owner, g.At.Repo)
	}
	return nil, false, fmt.Errorf("%s: GitHub answered %d", g.Name(), resp.StatusCode)
}

func (g *GitHubFile) now() time.Time {
	if g.Clock == nil {
		return time.Now()
	}
	return g.Clock.Now()
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
