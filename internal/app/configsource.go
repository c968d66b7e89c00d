package app

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"

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
	data, _, err := a.source.Read(ctx)
	if err != nil {
		if a.Config() == nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return a.configUnreadable(err, now)
	}
	cfg, err := a.parseConfig(name, data)
	switch {
	case err != nil && a.Config() == nil:
		return fmt.Errorf("configuration %s is invalid:\n%w", name, err)
	case err != nil:
		a.refuseConfig(data, err, now)
	default:
		a.putConfigInForce(data, cfg, now)
	}
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
