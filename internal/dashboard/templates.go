package dashboard

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// pageTemplate is one page: the layout with that page's "content".
type pageTemplate = template.Template

// pageNames are the pages; each has templates/NAME.html defining "content".
var pageNames = []string{"pools", "jobs", "job", "instances", "config", "login", "error"}

func parsePages() (map[string]*pageTemplate, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/chart.html")
	if err != nil {
		return nil, fmt.Errorf("parse layout: %w", err)
	}
	pages := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(templateFiles, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"age":   age,
	"dur":   shortDuration,
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"stamp": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"until": func(now, t time.Time) string { return shortDuration(t.Sub(now)) },
	"entry": entryName,
	"num":   func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"score": func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"add":   func(a, b int) int { return a + b },
	// when writes an instant for people: to the second, in UTC.
	"when":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"maxRecent":  func() int { return maxRecentRows },
	"recentJobs": func() int { return recentJobs },
}

// age is how long ago t was at now, as the page's script also writes it.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return shortDuration(now.Sub(t))
}

// shortDuration writes a duration in two units at most: 4.2s, 42s, 3m05s,
// 2h07m, 3d4h. The page's script formats ages the same way.
func shortDuration(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < 10*time.Second:
		return neg + strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return fmt.Sprintf("%s%ds", neg, int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%s%dm%02ds", neg, int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%s%dh%02dm", neg, int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%s%dd%dh", neg, int(d.Hours())/24, int(d.Hours())%24)
}

// assetHandler serves the embedded CSS, script and icon. They hold no data,
// so they need no session (the login page uses them).
func assetHandler() http.Handler {
	sub, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic("dashboard assets: " + err.Error()) // the embed directive guarantees the directory
	}
	files := http.FileServerFS(sub)
	return http.StripPrefix("/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	}))
}
