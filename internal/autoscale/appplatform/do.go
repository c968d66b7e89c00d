package appplatform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
)

// DefaultDOTimeout bounds each DigitalOcean request.
const DefaultDOTimeout = 30 * time.Second

// AppOptions configure an AppPlatform client.
type AppOptions struct {
	Token   string // DO_API_TOKEN; a credential: never logged
	BaseURL string // DefaultDOAPIURL when empty
	AppID   string
	// Timeout bounds each request; DefaultDOTimeout when zero.
	Timeout time.Duration
	// Transport carries the requests; http.DefaultTransport when nil.
	Transport http.RoundTripper
	// Clock dates the end of a rate limit; the wall clock when nil.
	Clock domain.Clock
}

// AppPlatform reads and updates one App Platform app through godo. godo
// retries nothing here: a failed call fails the cycle, and the next cycle
// is the retry.
type AppPlatform struct {
	c     *godo.Client
	appID string
	clk   domain.Clock
}

// NewAppPlatform returns a client for the app. It makes no request.
func NewAppPlatform(o AppOptions) (*AppPlatform, error) {
	if o.Token == "" || o.AppID == "" {
		return nil, errors.New("app platform client: a token and an app id are required")
	}
	if o.BaseURL == "" {
		o.BaseURL = DefaultDOAPIURL
	}
	if !strings.HasSuffix(o.BaseURL, "/") {
		o.BaseURL += "/"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDOTimeout
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	hc := &http.Client{Transport: httpauth.BearerTransport(o.Token, o.Transport), Timeout: o.Timeout}
	c, err := godo.New(hc, godo.SetBaseURL(o.BaseURL), godo.SetUserAgent("bullpen"))
	if err != nil {
		return nil, fmt.Errorf("app platform client for %s: %w", o.BaseURL, err)
	}
	return &AppPlatform{c: c, appID: o.AppID, clk: o.Clock}, nil
}

// App is an App Platform app as read. Spec holds the spec's JSON values
// whole (see spec.go), so that an update writes back every field.
type App struct {
	ID        string
	UpdatedAt time.Time
	Spec      map[string]any
	// Deployments, when the app has them: the live one, the one being
	// rolled out, and the one waiting for it.
	Active, InProgress, Pending *godo.Deployment
}

// Deployment names the deployment that will carry the latest spec: the
// pending one, else the one in progress, else the active one; "" if none.
func (a *App) Deployment() string {
	for _, d := range []*godo.Deployment{a.Pending, a.InProgress, a.Active} {
		if d != nil && d.ID != "" {
			return d.ID
		}
	}
	return ""
}

// appDoc is the body of GET and PUT /v2/apps/{id}, spec left raw.
type appDoc struct {
	App *struct {
		ID         string           `json:"id"`
		UpdatedAt  time.Time        `json:"updated_at"`
		Spec       json.RawMessage  `json:"spec"`
		Active     *godo.Deployment `json:"active_deployment"`
		InProgress *godo.Deployment `json:"in_progress_deployment"`
		Pending    *godo.Deployment `json:"pending_deployment"`
	} `json:"app"`
}

// Get reads the app.
func (p *AppPlatform) Get(ctx context.Context) (*App, error) {
	return p.do(ctx, http.MethodGet, "get app "+p.appID, nil)
}

// Update replaces the app's spec, keeping the source versions of its
// components (update_all_source_versions false), so a change of scale
// deploys the same code.
func (p *AppPlatform) Update(ctx context.Context, spec map[string]any) (*App, error) {
	body := map[string]any{"spec": spec, "update_all_source_versions": false}
	return p.do(ctx, http.MethodPut, "update app "+p.appID, body)
}

func (p *AppPlatform) do(ctx context.Context, method, op string, body any) (*App, error) {
	req, err := p.c.NewRequest(ctx, method, "v2/apps/"+url.PathEscape(p.appID), body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var raw bytes.Buffer // godo copies the body here instead of decoding it
	if _, err := p.c.Do(ctx, req, &raw); err != nil {
		return nil, classifyDO(op, err, p.clk.Now())
	}
	var doc appDoc
	if err := json.Unmarshal(raw.Bytes(), &doc); err != nil {
		return nil, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	if doc.App == nil || len(doc.App.Spec) == 0 || string(doc.App.Spec) == "null" {
		return nil, fmt.Errorf("%s: DigitalOcean's answer lacks the app or its spec", op)
	}
	spec, err := decodeSpec(doc.App.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	a := doc.App
	return &App{ID: a.ID, UpdatedAt: a.UpdatedAt, Spec: spec, Active: a.Active, InProgress: a.InProgress, Pending: a.Pending}, nil
}

// maxScaleAttempts bounds SetWorkerCount's read-modify-write rounds.
const maxScaleAttempts = 3

// ScaleResult says how SetWorkerCount went.
type ScaleResult struct {
	App       *App // the app as read last: showing the new count, or the count another writer set
	Attempts  int
	Written   bool     // at least one update was accepted
	Conflicts []string // what moved under us, one line each
	// Superseded, when not empty, says how another writer changed the
	// worker's count from the one the decision was made on: n was not
	// written, or was overwritten, and the other writer's count stands.
	Superseded string
}

// SetWorkerCount sets the worker's instance_count to n without touching
// anything else, and checks the spec shows it. base is the app as read for
// the decision; its count is the one the decision was made on.
//
// The API has no conditional update, so each attempt narrows the race
// instead: it reads the latest spec and, if it differs from the one the
// decision was made on (another writer's change), notes a conflict and
// applies n on top of the latest, keeping that change; it writes; it reads
// back. A 409 answer starts another attempt from the latest spec; after
// maxScaleAttempts the error wraps ErrConflict. A change landing between
// an attempt's read and its write, milliseconds apart, is not seen.
//
// Another writer's count always wins: when the worker's count is no longer
// the one the decision was made on, before the write or on the read-back,
// nothing more is written and Superseded says so. A decision made on a
// count that no longer holds is not one to apply (a scale-up from 1 to 3
// would lower the 6 a person had just set); the next poll decides again
// on the count that does.
func (p *AppPlatform) SetWorkerCount(ctx context.Context, name string, base *App, n int) (ScaleResult, error) {
	var res ScaleResult
	from := -1
	if base != nil {
		c, err := WorkerCount(base.Spec, name)
		if err != nil {
			return res, err
		}
		from = c
	}
	for res.Attempts < maxScaleAttempts {
		res.Attempts++
		latest, err := p.Get(ctx)
		if err != nil {
			return res, err
		}
		if base != nil {
			if note := changeNote(base, latest); note != "" {
				res.Conflicts = append(res.Conflicts, note)
			}
		}
		cur, err := WorkerCount(latest.Spec, name)
		if err != nil {
			return res, err
		}
		if cur == n {
			res.App = latest // someone else got there first: nothing to write
			return res, nil
		}
		if from >= 0 && cur != from {
			res.App = latest
			res.Superseded = fmt.Sprintf("another writer set instance_count %d after the decision was made on %d; %d not written", cur, from, n)
			return res, nil
		}
		desired, err := withWorkerCount(latest.Spec, name, n)
		if err != nil {
			return res, err
		}
		if _, err := p.Update(ctx, desired); errors.Is(err, ErrConflict) {
			res.Conflicts = append(res.Conflicts, "DigitalOcean refused the update with 409 Conflict")
			base = latest // the next attempt notes only what changes after this read
			continue
		} else if err != nil {
			return res, err
		}
		res.Written = true
		back, err := p.Get(ctx)
		if err != nil {
			return res, fmt.Errorf("verify: %w", err)
		}
		got, err := WorkerCount(back.Spec, name)
		if err != nil {
			return res, fmt.Errorf("verify: %w", err)
		}
		res.App = back
		if got != n {
			res.Superseded = fmt.Sprintf("read back instance_count %d, not %d: another writer changed it after our update; left at %d", got, n, got)
		}
		return res, nil
	}
	return res, fmt.Errorf("set worker %q to %d instances: %w in each of %d attempts: %s",
		name, n, ErrConflict, maxScaleAttempts, strings.Join(res.Conflicts, "; "))
}

// changeNote describes how the latest app differs from base; "" if not.
func changeNote(base, latest *App) string {
	keys := changedKeys(base.Spec, latest.Spec)
	if len(keys) == 0 && latest.UpdatedAt.Equal(base.UpdatedAt) {
		return ""
	}
	if len(keys) == 0 {
		return fmt.Sprintf("the app was updated at %s with the same spec", latest.UpdatedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the spec changed since it was read (updated_at %s, fields %s); applying the count on top of it",
		latest.UpdatedAt.UTC().Format(time.RFC3339), strings.Join(keys, ", "))
}
