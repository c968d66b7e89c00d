package main

import (
	"context"
	"fmt"
	"html/template"
	"io"

	"github.com/bullpen-ci/bullpen/internal/github/appmanifest"
)

func init() {
	register("github", "GitHub helpers: the App manifest bullpen needs", cmdGitHub)
}

func githubUsage(w io.Writer) {
	fmt.Fprint(w, `usage: bullpen github app-manifest --name NAME --url URL --webhook-url URL [flags]

Prints the GitHub App manifest bullpen needs (its permissions, each for a
reason, and the workflow_job and push events). With --form it prints an HTML
page instead: open it in a browser signed in to GitHub and press the button,
and GitHub creates the App from the manifest (GitHub's manifest flow).

Run 'bullpen github app-manifest -h' for its flags.
`)
}

func cmdGitHub(ctx context.Context, e *env, args []string) int {
	return dispatch(ctx, e, "github", args, githubUsage, map[string]subcommand{
		"app-manifest": func(_ context.Context, e *env, args []string) int { return githubAppManifest(e, args) },
	})
}

// manifestForm posts the manifest to GitHub's App creation page.
var manifestForm = template.Must(template.New("form").Parse(`<!doctype html>
<meta charset="utf-8">
<title>Create the {{.Name}} GitHub App</title>
<form action="{{.Action}}" method="post">
<p>GitHub will create the App <strong>{{.Name}}</strong> from this manifest:</p>
<pre>{{.Manifest}}</pre>
<input type="hidden" name="manifest" value="{{.Manifest}}">
<button type="submit">Create the App on GitHub</button>
</form>
`))

func githubAppManifest(e *env, args []string) int {
	fs := e.flags("github app-manifest")
	var o appmanifest.Options
	fs.StringVar(&o.Name, "name", "", "the App's name (unique on GitHub), e.g. bullpen-acme")
	fs.StringVar(&o.HomepageURL, "url", "", "the App's homepage")
	fs.StringVar(&o.WebhookURL, "webhook-url", "", "bullpen serve's /webhook as GitHub reaches it, e.g. https://bullpen.example.com/webhook")
	fs.StringVar(&o.RedirectURL, "redirect-url", "", "where GitHub sends you after creating the App (optional)")
	fs.BoolVar(&o.Public, "public", false, "let other accounts install the App")
	org := fs.String("org", "", "create the App in this organisation (default: your user account)")
	web := fs.String("github-web-url", "https://github.com", "GitHub's web root (a GitHub Enterprise Server's for GHES)")
	form := fs.Bool("form", false, "print an HTML page that posts the manifest to GitHub")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	manifest, err := appmanifest.Manifest(o)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen github app-manifest:", err)
		return 2
	}
	action := appmanifest.CreateURL(*web, *org)
	if *form {
		err = manifestForm.Execute(e.stdout, map[string]string{"Name": o.Name, "Action": action, "Manifest": string(manifest)})
		if err != nil {
			fmt.Fprintln(e.stderr, "bullpen github app-manifest:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(e.stdout, "%s\n", manifest)
	fmt.Fprintf(e.stderr, "Post it as the form field \"manifest\" to %s (or use --form), then give serve the App id and a private key from the App's settings.\n", action)
	return 0
}
