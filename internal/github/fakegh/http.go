package fakegh

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// Documentation links GitHub puts in error bodies; clients branch on the
// secondary rate limit's.
const (
	docsBase          = "https://docs.github.com/rest"
	docsRateLimit     = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
	docsSecondaryRate = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	rateLimitPerHour  = 5000
	secondaryRetry    = 60 // seconds GitHub asks a client to wait after a secondary limit
	defaultPerPage    = 30
	maxPerPage        = 100
	// searchCap is how many workflow runs GitHub finds at most for a
	// listing filtered by created or status.
	searchCap = 1000
)

// faults is the injected trouble, guarded by Server.mu.
type faults struct {
	fails     []*injected
	rateReset time.Time
	pageSize  int
	used      int
	// retryAfter is what a secondary limit asks a client to wait, in
	// seconds; secondaryRetry when zero, and no time at all (no
	// retry-after header) when negative.
	retryAfter int
}

type injected struct {
	pattern string
	status  int
	n       int
}

func newFaults() faults { return faults{} }

// FailNext makes the next n requests matching pattern fail with status.
// pattern is a route as the package comment lists it, with or without its
// method ("GET /repos/{owner}/{repo}/actions/runs"), or a path.Match glob
// over the request path, with or without the method in front
// ("DELETE /orgs/acme/actions/runners/*"). A 429 comes as GitHub's
// secondary rate limit (its message, the primary limit's headers with
// calls left, and retry-after unless SecondaryRetryAfter says none), a 403
// as a permission refusal (no rate-limit headers); every status has
// GitHub's error body.
func (s *Server) FailNext(pattern string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.fails = append(s.faults.fails, &injected{pattern: pattern, status: status, n: n})
}

// RateLimit refuses every request with GitHub's primary rate limit answer
// (403, x-ratelimit-remaining: 0, x-ratelimit-reset) until reset on the
// server's clock. A zero reset lifts the limit.
func (s *Server) RateLimit(reset time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.rateReset = reset
}

// SecondaryRetryAfter sets what an injected secondary limit (a 429) asks a
// client to wait; GitHub asks a minute. Zero makes it ask no time at all:
// no retry-after header, while x-ratelimit-reset still names the primary
// limit's reset, up to an hour away, as some of GitHub's answers do.
func (s *Server) SecondaryRetryAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.retryAfter = max(int(d.Seconds()), 1)
	if d == 0 {
		s.faults.retryAfter = -1
	}
}

// PageSize caps per_page, so that lists paginate with few records. Zero
// restores GitHub's cap of 100.
func (s *Server) PageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.pageSize = n
}

// Requests lists the requests served so far, as "METHOD /path?query".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Count is how many requests so far went to a route, named as the package
// comment lists it, with or without its method.
func (s *Server) Count(pattern string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[pattern]
}

// handler routes requests after the checks every request goes through.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range s.routes() {
		mux.HandleFunc(pattern, h)
	}
	for pattern, h := range s.enterpriseRoutes() {
		mux.HandleFunc(pattern, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if s.intercept(w, r, pattern) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// intercept records the request and answers it itself when the route is
// unknown, the credentials are wrong, the rate limit holds or a failure is
// injected. It reports whether it answered.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request, pattern string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(r, pattern)
	now := s.clk.Now()
	switch {
	case pattern == "":
		writeError(w, http.StatusNotFound, "Not Found")
	case !isAppRoute(pattern) && !isFakeRoute(pattern) && !s.auth.accepts(r.Header.Get("Authorization"), now):
		writeError(w, http.StatusUnauthorized, "Bad credentials")
	case !isAppRoute(pattern) && s.outOfReach(r):
		writeError(w, http.StatusNotFound, "Not Found")
	case now.Before(s.faults.rateReset):
		s.rateHeaders(w, now)
		writeError(w, http.StatusForbidden, "API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.")
	default:
		if f := s.injectedFor(r, pattern); f != nil {
			if f.status == http.StatusTooManyRequests {
				s.rateHeaders(w, now)
			}
			writeInjected(w, f.status, cmp.Or(s.faults.retryAfter, secondaryRetry))
			return true
		}
		s.faults.used++
		s.rateHeaders(w, now)
		return false
	}
	return true
}

func (s *Server) record(r *http.Request, pattern string) {
	line := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		line += "?" + r.URL.RawQuery
	}
	s.requests = append(s.requests, line)
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	if pattern != "" {
		s.counts[pattern]++
		_, route, _ := strings.Cut(pattern, " ")
		s.counts[route]++
	}
}

func (s *Server) injectedFor(r *http.Request, pattern string) *injected {
	for _, f := range s.faults.fails {
		if f.n > 0 && matches(f.pattern, r, pattern) {
			f.n--
			return f
		}
	}
	return nil
}

func matches(p string, r *http.Request, pattern string) bool {
	_, route, _ := strings.Cut(pattern, " ")
	if p == pattern || p == route {
		return true
	}
	if ok, _ := path.Match(p, r.URL.Path); ok {
		return true
	}
	ok, _ := path.Match(p, r.Method+" "+r.URL.Path)
	return ok
}

// rateHeaders are the primary rate limit's headers, on every answer.
func (s *Server) rateHeaders(w http.ResponseWriter, now time.Time) {
	remaining := max(rateLimitPerHour-s.faults.used, 1)
	reset := now.Add(time.Hour)
	if now.Before(s.faults.rateReset) {
		remaining, reset = 0, s.faults.rateReset
	}
	h := w.Header()
	h.Set("x-ratelimit-limit", strconv.Itoa(rateLimitPerHour))
	h.Set("x-ratelimit-remaining", strconv.Itoa(remaining))
	h.Set("x-ratelimit-used", strconv.Itoa(rateLimitPerHour-remaining))
	h.Set("x-ratelimit-reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("x-ratelimit-resource", "core")
}

func writeInjected(w http.ResponseWriter, status, retryAfter int) {
	switch status {
	case http.StatusTooManyRequests:
		if retryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(retryAfter))
		}
		writeErrorDoc(w, status, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", docsSecondaryRate)
	case http.StatusForbidden:
		writeError(w, status, "Resource not accessible by integration")
	case http.StatusUnauthorized:
		writeError(w, status, "Bad credentials")
	case http.StatusUnprocessableEntity:
		writeError(w, status, "Validation Failed")
	default:
		writeError(w, status, http.StatusText(status))
	}
}

// writeError answers with GitHub's basic-error body.
func writeError(w http.ResponseWriter, status int, message string) {
	doc := docsBase
	if status == http.StatusForbidden && strings.HasPrefix(message, "API rate limit") {
		doc = docsRateLimit
	}
	writeErrorDoc(w, status, message, doc)
}

func writeErrorDoc(w http.ResponseWriter, status int, message, doc string) {
	writeJSON(w, status, map[string]any{"message": message, "documentation_url": doc, "status": strconv.Itoa(status)})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// pageJSON is the requested page of records, each as toJSON renders it,
// and sets the Link header GitHub sends with it. An empty page is [], not
// null, as GitHub lists nothing.
func pageJSON[T any](s *Server, w http.ResponseWriter, r *http.Request, records []T, toJSON func(T) map[string]any) []map[string]any {
	lo, hi := s.paginate(w, r, len(records))
	page := []map[string]any{}
	for _, rec := range records[lo:hi] {
		page = append(page, toJSON(rec))
	}
	return page
}

// paginate returns the slice bounds of the requested page of n records
// and sets the Link header GitHub sends with it.
func (s *Server) paginate(w http.ResponseWriter, r *http.Request, n int) (lo, hi int) {
	q := r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || perPage < 1 {
		perPage = defaultPerPage
	}
	perPage = min(perPage, maxPerPage)
	if s.faults.pageSize > 0 {
		perPage = min(perPage, s.faults.pageSize)
	}
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	last := max((n+perPage-1)/perPage, 1)
	lo, hi = min((page-1)*perPage, n), min(page*perPage, n)

	link := func(p int, rel string) string {
		q.Set("page", strconv.Itoa(p))
		q.Set("per_page", strconv.Itoa(perPage))
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		return fmt.Sprintf(`<%s%s>; rel="%s"`, s.srv.URL, u.String(), rel)
	}
	var links []string
	if page > 1 {
		links = append(links, link(min(page-1, last), "prev"))
	}
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	return lo, hi
}
