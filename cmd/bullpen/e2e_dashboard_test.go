package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// chromium finds Debian's chromium. Without it the browser test skips, or
// fails under CI=true: CI must run it (scripts/test installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "the dashboard's browser test needs Chromium (Debian: apt-get install chromium; scripts/test installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium with a fresh profile, driven over the
// DevTools protocol; every wait is on a selector, bounded by the context.
type browser struct {
	t      *testing.T
	ctx    context.Context
	shots  string // where every screenshot goes: the test's artifacts
	readme string // where the README's go too, when set ($BULLPEN_SCREENSHOTS)
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 860))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, shots: t.ArtifactDir(), readme: os.Getenv("BULLPEN_SCREENSHOTS")}
	// The first action starts the browser, which lives as long as the
	// context of that action: it gets no deadline of its own.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860)); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return b
}

// do runs steps, giving them at most a minute.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser at %s: %v", loc, err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func (b *browser) eval(expr string) bool {
	b.t.Helper()
	ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return ok
}

// screenshot saves the whole page as name, reduced to at most 256 colours;
// the README's screenshots also go to $BULLPEN_SCREENSHOTS.
func (b *browser) screenshot(name string, inReadme bool) {
	b.t.Helper()
	raw, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	small, err := paletted(raw)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{b.shots}
	if inReadme && b.readme != "" {
		dirs = append(dirs, b.readme)
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, name), small, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// paletted re-encodes a PNG with at most 256 of its colours: the most
// frequent first, skipping those close to one already taken so that
// anti-aliasing shades leave room for small marks of their own colour. A
// flat page loses nothing visible and weighs a third as much.
func paletted(raw []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	freq := map[color.RGBA]int{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			freq[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	colors := make([]color.RGBA, 0, len(freq))
	for c := range freq {
		colors = append(colors, c)
	}
	slices.SortFunc(colors, func(a, b color.RGBA) int { return freq[b] - freq[a] })
	pal := color.Palette{}
	for _, c := range colors {
		if len(pal) == 256 {
			break
		}
		if !slices.ContainsFunc(pal, func(p color.Color) bool { return near(p.(color.RGBA), c) }) {
			pal = append(pal, c)
		}
	}
	out := image.NewPaletted(bounds, pal)
	draw.Draw(out, bounds, img, bounds.Min, draw.Src)
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	err = enc.Encode(&buf, out)
	return buf.Bytes(), err
}

func near(a, b color.RGBA) bool {
	d := func(x, y uint8) int { return (int(x) - int(y)) * (int(x) - int(y)) }
	return d(a.R, b.R)+d(a.G, b.G)+d(a.B, b.B) < 3*10*10
}

// deliver posts a signed workflow_job delivery, as GitHub would.
func deliver(t *testing.T, s *server, id string, j testfixtures.Job) {
	t.Helper()
	body := testfixtures.Payload(j)
	if code, resp := s.post(id, body, testfixtures.GoSign(s.secret, body)); code != http.StatusAccepted {
		t.Fatalf("delivery %s: %d %s", id, code, resp)
	}
}

// The dashboard in a real browser against a real `bullpen serve` on the
// example configuration and the simulated cloud: sign in, see the pools
// reach their targets, follow a job from queued to finished, see a
// rejected job's reason, and find a label carrying <script> shown as text.
func TestDashboardInABrowser(t *testing.T) {
	path := chromium(t)
	cfg, err := os.ReadFile("../../examples/runs-on.yml")
	if err != nil {
		t.Fatal(err)
	}
	viewerFile := writeFile(t, t.TempDir(), "viewer-token", "e2e-viewer-token\n")
	s := startServerWith(t, string(cfg), "--environment", "dev", "--sim-latency", "zero",
		"--converge-every", "500ms", "--terminate-every", "500ms", "--viewer-token-file", viewerFile)
	b := newBrowser(t, path)

	signIn(t, b, s)
	b.do(chromedp.WaitVisible(chromedp.CSS(`#pools[data-all-at-target="true"]`)))
	if !b.eval(`document.querySelectorAll('[data-pool][data-at-target="true"]').length === 4`) {
		t.Error("the pools page does not show the example's four pools at their targets")
	}
	b.screenshot("dashboard-pools.png", true)

	followAJob(t, b, s)
	serveABurst(t, b, s)
	rejectedJobShowsItsReason(t, b, s)
	b.do(chromedp.Navigate(s.base+"/instances"), chromedp.WaitVisible(chromedp.CSS(`#ended tr[data-state="terminated"]`)))
	b.screenshot("dashboard-instances.png", false)

	viewerTokenOnlyReads(t, s)
	statusCommandShowsThePools(t, s)
	if strings.Contains(s.logs.String(), s.token) || strings.Contains(s.logs.String(), "e2e-viewer-token") {
		t.Error("a token reached the server log")
	}
}

func signIn(t *testing.T, b *browser, s *server) {
	t.Helper()
	b.do(chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"), chromedp.Submit(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")),
		chromedp.SendKeys(chromedp.CSS("#token"), s.token), chromedp.Submit(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#pools")))
	cookies, err := chromedp.Run(b.ctx, chromedp.Action[[]*network.Cookie](func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{s.base}})
		return res.Cookies, err
	}))
	if err != nil || len(cookies) != 1 {
		t.Fatalf("cookies %v (%v), want the session alone", cookies, err)
	}
	c := cookies[0]
	if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Session || c.Expires < float64(time.Now().Unix()) ||
		strings.Contains(c.Value, s.token) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, an expiry, no token", c)
	}
}

func followAJob(t *testing.T, b *browser, s *server) {
	t.Helper()
	const id, run = 7_000_001, 8_000_001
	job := testfixtures.Job{ID: id, RunID: run, Labels: []string{fmt.Sprintf("runs-on=%d/pool=small-x64/env=dev", run)}, Created: time.Now()}
	b.do(chromedp.Navigate(s.base+"/jobs"), chromedp.WaitVisible(chromedp.CSS("#active")))
	deliver(t, s, "browser-queued", job)
	row := fmt.Sprintf(`tr[data-job="%d"]`, id)
	b.do(chromedp.WaitVisible(chromedp.CSS(row+" a")), chromedp.Click(chromedp.CSS(row+" a")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#job[data-job="%d"]`, id))),
		chromedp.WaitVisible(chromedp.CSS(`li[data-event="queued"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#job[data-status="assigned"] li[data-event="assigned"]`)))
	var view struct {
		RunnerName string `json:"runner_name"`
	}
	s.get(fmt.Sprintf("/api/v1/jobs/%d", id), &view)
	if got := b.text(".runner"); got != view.RunnerName || got == "" {
		t.Errorf("the page names runner %q, the API %q", got, view.RunnerName)
	}
	job.Action, job.RunnerName, job.Started = "in_progress", view.RunnerName, time.Now()
	deliver(t, s, "browser-in-progress", job)
	b.do(chromedp.WaitVisible(chromedp.CSS(`#job[data-status="running"] li[data-event="started"]`)))
	job.Action, job.Conclusion, job.Completed = "completed", "success", time.Now()
	deliver(t, s, "browser-completed", job)
	b.do(chromedp.WaitVisible(chromedp.CSS(`#job[data-status="completed"] li[data-event="finished"]`)))
	if got := b.text(`li[data-event="finished"]`); !strings.Contains(got, "finished: success") {
		t.Errorf("finished event %q", got)
	}
	b.screenshot("dashboard-job.png", false)
}

// serveABurst sends jobs served each way (a hot and a stopped pool member,
// a cold start), finishes all but one, and waits for the jobs page to show
// them: the page the README shows.
func serveABurst(t *testing.T, b *browser, s *server) {
	t.Helper()
	labels := []string{"runs-on=%d/pool=small-x64/env=dev", "runs-on=%d/pool=small-x64/env=dev", "runs-on=%d/runner=small-x64/env=dev", "runs-on=%d/pool=medium-x64/env=dev"}
	jobs := make([]testfixtures.Job, len(labels))
	b.do(chromedp.Navigate(s.base + "/jobs"))
	for k, l := range labels {
		id, run := int64(7_000_010+k), int64(8_000_010+k)
		jobs[k] = testfixtures.Job{ID: id, RunID: run, Labels: []string{fmt.Sprintf(l, run)}, Created: time.Now()}
		deliver(t, s, fmt.Sprintf("burst-%d", k), jobs[k])
	}
	for k, j := range jobs {
		b.do(chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#active tr[data-job="%d"][data-status="assigned"]`, j.ID))))
		var view struct {
			RunnerName string `json:"runner_name"`
		}
		s.get(fmt.Sprintf("/api/v1/jobs/%d", j.ID), &view)
		j.Action, j.RunnerName, j.Started = "in_progress", view.RunnerName, time.Now()
		deliver(t, s, fmt.Sprintf("burst-%d-started", k), j)
		if k < len(jobs)-1 {
			j.Action, j.Conclusion, j.Completed = "completed", "success", time.Now()
			deliver(t, s, fmt.Sprintf("burst-%d-completed", k), j)
		}
	}
	for k, j := range jobs {
		want := "completed"
		if k == len(jobs)-1 {
			want = "running"
		}
		b.do(chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"][data-status="%s"]`, j.ID, want))))
	}
}

// rejectedJobShowsItsReason sends a job for a pool this environment does
// not have, and one whose labels carry markup (refused too: the label
// parses as an unknown key).
func rejectedJobShowsItsReason(t *testing.T, b *browser, s *server) {
	t.Helper()
	const gpu, markup, run = 7_000_002, 7_000_003, 8_000_002
	const label = `<script>window.pwned=1</script>`
	deliver(t, s, "browser-rejected", testfixtures.Job{ID: gpu, RunID: run, Created: time.Now(),
		Labels: []string{fmt.Sprintf("runs-on=%d/pool=gpu/env=dev", run)}})
	deliver(t, s, "browser-markup", testfixtures.Job{ID: markup, RunID: run, Created: time.Now(),
		Labels: []string{fmt.Sprintf("runs-on=%d/pool=small-x64/env=dev", run), label}})
	row := func(id int) string { return fmt.Sprintf(`#rejected tr[data-job="%d"]`, id) }
	b.do(chromedp.Navigate(s.base+"/jobs"), chromedp.WaitVisible(chromedp.CSS(row(gpu))), chromedp.WaitVisible(chromedp.CSS(row(markup))))
	if got := b.text(row(gpu) + " .reason"); !strings.Contains(got, `pool "gpu" is not configured for environment "dev"`) {
		t.Errorf("rejection reason %q", got)
	}
	if got := b.text(row(markup) + " .labels"); !strings.Contains(got, label) {
		t.Errorf("labels shown as %q, want the <script> label as text", got)
	}
	if got := b.text(row(markup) + " .reason"); !strings.Contains(got, `label "`+label+`"`) {
		t.Errorf("rejection reason %q, want the label quoted as text", got)
	}
	if !b.eval(`window.pwned === undefined && document.scripts.length === 1`) {
		t.Error("the label became a script")
	}
	b.screenshot("dashboard-jobs.png", true)
}

func viewerTokenOnlyReads(t *testing.T, s *server) {
	t.Helper()
	for path, want := range map[string]int{"/": http.StatusOK, "/jobs": http.StatusOK, "/api/v1/pools": http.StatusForbidden} {
		req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
		req.Header.Set("Authorization", "Bearer e2e-viewer-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("viewer token, GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func statusCommandShowsThePools(t *testing.T, s *server) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "status", "--server", s.base)
	cmd.Env = append(os.Environ(), "BULLPEN_ADMIN_TOKEN="+s.token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bullpen status: %v\n%s", err, out)
	}
	for _, want := range []string{"pool           schedule", "small-x64", "medium-x64", "burst-x64", "dependabot", "2 rejected"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bullpen status lacks %q:\n%s", want, out)
		}
	}
}
