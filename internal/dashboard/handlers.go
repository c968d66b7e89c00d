package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/httpauth"
)

// pageResult is what a page handler makes of a snapshot.
type pageResult struct {
	Title string
	Data  any
	// Live pages follow the snapshot; a finished job's page does not change.
	Live bool
}

// pageData is what the layout renders.
type pageData struct {
	Page    string // which page: the nav highlights it
	Title   string
	Role    string
	Env     string
	Now     time.Time
	Version string // of the content; the event stream announces newer ones
	Live    bool
	Stale   string // why the data may be old; "" when it is current
	Data    any
}

type roleKey struct{}

// requireSession lets through requests with a valid session or bearer
// token. Others are sent to the login form, except fragments and streams,
// which get 401 (the page's script reloads, and the reload goes to login),
// and bearer tokens from a throttled address, which get 429.
func (d *Dashboard) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role, wait, ok := d.auth.requestRole(r)
		if ok {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
			return
		}
		if wait > 0 {
			http.Error(w, throttled(w, wait), http.StatusTooManyRequests)
			return
		}
		if r.Header.Get("X-Fragment") != "" || r.URL.Path == "/events" {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	})
}

func roleOf(ctx context.Context) string {
	role, _ := ctx.Value(roleKey{}).(string)
	return role
}

// page serves one page, or its content alone when the page's script asks
// for it (X-Fragment) after the event stream announced a change.
func (d *Dashboard) page(name string, fn func(*http.Request, *snapshot) (pageResult, error)) http.Handler {
	return d.requireSession(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, stale := d.cache.get(r.Context())
		if s == nil {
			d.unavailable(w, r, stale)
			return
		}
		res, err := fn(r, s)
		if errors.Is(err, errNoJob) {
			d.notFound(w, r)
			return
		}
		if err != nil {
			d.log.Warn("dashboard: "+name+" page", "err", err)
			d.unavailable(w, r, err)
			return
		}
		p := pageData{Page: name, Title: res.Title, Role: roleOf(r.Context()), Env: d.opts.Environment,
			Now: d.opts.Clock.Now(), Version: d.version(s, stale), Live: res.Live, Data: res.Data}
		var failure *errStale
		if errors.As(stale, &failure) {
			p.Stale = "The store did not answer; this is what it held at " + s.at.UTC().Format("15:04:05") +
				" UTC. Stale since " + failure.since.UTC().Format("15:04") + " UTC."
		}
		d.render(w, name, p, r.Header.Get("X-Fragment") != "", http.StatusOK)
	}))
}

// version identifies what a page shows: the snapshot's content, whether
// the store has stopped answering (and since when), and the
// configuration's last load or refusal.
func (d *Dashboard) version(s *snapshot, stale error) string {
	v := strconv.FormatUint(s.gen, 10)
	var failure *errStale
	if errors.As(stale, &failure) {
		v += ".stale" + strconv.FormatInt(failure.since.Unix(), 36)
	}
	if d.opts.Config != nil {
		st := d.opts.Config()
		v += "." + strconv.FormatInt(st.LoadedAt.UnixNano(), 36)
		if st.Refused != nil {
			v += "." + strconv.FormatInt(st.Refused.At.UnixNano(), 36)
		}
	}
	return v
}

// render executes a page into a buffer first, so that a failure is a clean
// 500 rather than half a page.
func (d *Dashboard) render(w http.ResponseWriter, name string, p pageData, fragment bool, status int) {
	t, ok := d.pages[name]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	tmpl := "layout"
	if fragment {
		tmpl = "live"
	}
	if err := t.ExecuteTemplate(&buf, tmpl, p); err != nil {
		d.log.Error("dashboard: render "+name, "err", err)
		http.Error(w, "the page could not be drawn; see the server log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Version", p.Version)
	h.Set("X-Server-Now", p.Now.UTC().Format(time.RFC3339Nano))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (d *Dashboard) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		d.log.Warn("dashboard: no data to show", "err", err)
	}
	d.render(w, "error", pageData{Page: "error", Title: "Unavailable", Role: roleOf(r.Context()), Env: d.opts.Environment,
		Now: d.opts.Clock.Now(), Data: "The store did not answer; see the server log. This page does not retry by itself."},
		false, http.StatusServiceUnavailable)
}

func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request) {
	d.render(w, "error", pageData{Page: "error", Title: "Not found", Role: roleOf(r.Context()), Env: d.opts.Environment,
		Now: d.opts.Clock.Now(), Data: "There is nothing at this address (a finished job is kept for the job retention only)."},
		r.Header.Get("X-Fragment") != "", http.StatusNotFound)
}

type loginData struct {
	Next   string
	Error  string
	Viewer bool   // a viewer token is configured
	TTL    string // how long a session lasts
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	_, wait, ok := d.auth.requestRole(r)
	if ok {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if wait > 0 {
		d.renderLogin(w, loginData{Next: next, Error: throttled(w, wait), Viewer: d.auth.hasViewer()}, http.StatusTooManyRequests)
		return
	}
	d.renderLogin(w, loginData{Next: next, Viewer: d.auth.hasViewer()}, http.StatusOK)
}

// maxLoginForm bounds what a login post may send.
const maxLoginForm = 4 << 10

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		d.renderLogin(w, loginData{Next: "/", Error: "The form could not be read.", Viewer: d.auth.hasViewer()}, http.StatusBadRequest)
		return
	}
	next := localPath(r.PostForm.Get("next"))
	// Trimmed as bearer tokens and token files are: a token pasted with a
	// trailing newline is the token, not a wrong guess.
	token := strings.TrimSpace(r.PostForm.Get("token"))
	role, wait, ok := d.auth.check(r, httpauth.SurfaceDashboardLogin, token)
	if wait > 0 {
		d.renderLogin(w, loginData{Next: next, Error: throttled(w, wait), Viewer: d.auth.hasViewer()}, http.StatusTooManyRequests)
		return
	}
	if !ok {
		// The guess is never logged: it may be a real token mistyped. One
		// line per refusal is at most the limiter's few per address and
		// window (a throttled attempt logs nothing here), and it leaves a
		// trace of slow guessing that never trips the limiter's warning.
		d.log.Info("dashboard: login refused", "remote", r.RemoteAddr)
		d.renderLogin(w, loginData{Next: next, Error: "That is neither the admin token nor the viewer token.",
			Viewer: d.auth.hasViewer()}, http.StatusUnauthorized)
		return
	}
	value, expires := d.auth.issue(role)
	http.SetCookie(w, cookie(r, value, expires, d.auth.ttl))
	d.log.Info("dashboard: signed in", "role", role, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// throttled sets Retry-After on the answer to a throttled address and
// returns its text.
func throttled(w http.ResponseWriter, wait time.Duration) string {
	return fmt.Sprintf("Too many wrong tokens from your address: try again in %d s.", httpauth.RetryAfter(w, wait))
}

// logout deletes this browser's session cookie. The session itself stays
// valid until it expires (sessions are not recorded anywhere, so there is
// nothing to revoke); the login page says so, and that changing a token
// ends every session.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, cookie(r, "", time.Time{}, 0))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (d *Dashboard) renderLogin(w http.ResponseWriter, data loginData, status int) {
	data.TTL = shortDuration(d.auth.ttl)
	d.render(w, "login", pageData{Page: "login", Title: "Sign in", Env: d.opts.Environment, Now: d.opts.Clock.Now(), Data: data},
		false, status)
}
