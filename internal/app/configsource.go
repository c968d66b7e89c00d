package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/dashboard"
	"github.com/bullpen-ci/bullpen/internal/github/installations"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// newConfigSource builds the source ConfigPath names — a file, or a file
// in a GitHub repository read through the GitHub the options chose — and
// reads it once: the first configuration when none was given. When one
// was given (serve parses a file before the app starts), the file as read
// here replaces it if it validates, since it may have changed in between
// and is what later reads compare with; if it does not, the one given
// stays in force and the file is reported as refused.
func (a *App) newConfigSource(ctx context.Context) error {
	var err error
	if a.configReloads, err = newConfigReloads(a.opts.Registry); err != nil {
		return err
	}
	a.configs = &dashboard.ConfigRecorder{}
	path := a.opts.ConfigPath
	if path == "" {
		return nil
	}
	if !strings.HasPrefix(path, configsource.Scheme) {
		a.source = &configsource.File{Path: path}
	} else {
		src, err := a.repositorySource(path)
		if err != nil {
			return err
		}
		a.source = src
	}
	name, now := a.source.Name(), a.opts.Clock.Now()
	if given := a.Config(); given != nil {
		a.configs.Loaded(name, nil, given, now) // its file is not known until a read matches it
	}
	data, _, readErr := a.source.Read(ctx)
	if readErr != nil && a.Config() != nil {
		return a.configUnreadable(readErr, now)
	}
	var parseErr error
	if readErr == nil {
		cfg, err := a.parseConfig(name, data)
		switch {
		case err == nil:
			a.putConfigInForce(ctx, data, cfg, now)
			return nil
		case a.Config() != nil:
			a.refuseConfig(data, err, now)
			return nil
		}
		parseErr = err
	}
	if err := a.startOnRecord(ctx, name); err != nil {
		if readErr != nil {
			return fmt.Errorf("configuration: %w\n%w", readErr, err)
		}
		return fmt.Errorf("configuration %s is invalid:\n%w\n%w", name, parseErr, err)
	}
	if readErr != nil {
		return a.configUnreadable(readErr, now)
	}
	a.refuseConfig(data, parseErr, now)
	return nil
}

// ErrNoConfiguration is why a start found nothing to serve: the source
// could not be read or did not validate, and the store keeps no file put
// in force from it before that validates.
var ErrNoConfiguration = errors.New("no earlier configuration to start on")

// startOnRecord puts in force the file last put in force from the source,
// as the store keeps it, so that a replica starting while its source
// cannot be read (GitHub down) or holds a file that does not validate
// serves what the other replicas serve, and what it served before it
// stopped, rather than nothing. The source's problem is reported as on a
// reload, and the next read that validates replaces it.
func (a *App) startOnRecord(ctx context.Context, name string) error {
	rec, found, err := a.Store.GetConfiguration(ctx, name)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNoConfiguration, err)
	case !found:
		return fmt.Errorf("%w: the store keeps none from %s", ErrNoConfiguration, name)
	}
	put := rec.At.UTC().Format(time.RFC3339)
	cfg, err := a.parseConfig(name, rec.Data)
	if err != nil {
		return fmt.Errorf("%w: the one the store keeps from %s, put in force at %s, is invalid too:\n%w", ErrNoConfiguration, name, put, err)
	}
	a.inForce(rec.Data, cfg, rec.At)
	a.opts.Log.Warn("starting on the configuration last put in force, as the store keeps it", "path", name, "put_in_force", put)
	return nil
}

// repositorySource reads a configuration from GitHub with this app's
// credentials.
func (a *App) repositorySource(path string) (configsource.Source, error) {
	loc, err := configsource.ParseLocation(path)
	if err != nil {
		return nil, err
	}
	src := &configsource.GitHubFile{At: loc, Clock: a.opts.Clock}
	switch g := a.GitHub.(type) {
	case *installations.GitHub:
		src.BaseURL, src.Client = g.BaseURL(), g.HTTPClient
	case *rest.Client:
		src.BaseURL = rest.APIRoot(a.opts.GitHubAPI.URL)
		hc := &http.Client{Transport: httpauth.BearerTransport(a.opts.GitHubAPI.Token, cmp.Or(a.githubTransport, http.DefaultTransport)), Timeout: rest.DefaultTimeout}
		src.Client = func(context.Context, string) (*http.Client, error) { return hc, nil }
	default:
		return nil, fmt.Errorf("configuration %s: a configuration in a GitHub repository needs --github app or token", path)
	}
	return src, nil
}

// configPushed reads the configuration at once when a push changes the
// branch it is read from; the read is conditional, so a push that did not
// touch the file costs a 304.
func (a *App) configPushed(p webhook.Push) {
	src, ok := a.source.(*configsource.GitHubFile)
	if !ok || !strings.EqualFold(p.Repo, src.At.Owner+"/"+src.At.Repo) {
		return
	}
	switch ref := src.At.Ref; {
	case ref != "" && p.Ref != "refs/heads/"+ref && p.Ref != "refs/tags/"+ref:
		return
	case ref == "" && p.DefaultBranch != "" && p.Ref != "refs/heads/"+p.DefaultBranch:
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), rest.DefaultTimeout)
		defer cancel()
		if err := a.reloadConfig(ctx); err != nil {
			a.opts.Log.Warn("read the configuration after a push", "repo", p.Repo, "err", err)
		}
	}()
}
