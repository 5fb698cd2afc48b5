package livepage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/floodgate/floodgate/internal/harness"
)

// browserHint says how to get the browser the page's test drives.
const browserHint = "the live page's test drives headless Chromium: apt-get install chromium"

// browser is one tab of a headless Chromium, driven over the DevTools
// protocol by chromedp.
type browser struct {
	t   *testing.T
	ctx context.Context // chromedp's context of the tab
}

// newBrowser starts headless Chromium, closed when the test ends. It is
// in the processes tier (harness.Require): a missing chromium fails the
// test with the install hint.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	chromium := harness.Require(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser; no timeout on it, which would
	// stop the browser when it expires.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v (%s)", chromium, err, browserHint)
	}
	return &browser{t: t, ctx: ctx}
}

// run runs one action in the tab, failing the test after 30 s.
func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open navigates to url and waits for the page to load.
func (b *browser) open(url string) {
	b.t.Helper()
	run(b, "open "+url, chromedp.Navigate(url))
}

// eval runs script (a function body that returns a value) in the page and
// decodes what it returns into out.
func (b *browser) eval(out any, script string) {
	b.t.Helper()
	raw := run(b, "evaluate", chromedp.Evaluate[[]byte]("(() => {"+script+"\n})()"))
	if err := json.Unmarshal(raw, out); err != nil {
		b.t.Fatalf("evaluate: %v: %s", err, raw)
	}
}

// viewport sets the tab's viewport to width×height CSS pixels, at one
// device pixel per CSS pixel.
func (b *browser) viewport(width, height int64) {
	b.t.Helper()
	run(b, "viewport", chromedp.EmulateViewport(width, height))
}

// screenshot returns the viewport as PNG.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	return run(b, "screenshot", chromedp.CaptureScreenshot())
}
