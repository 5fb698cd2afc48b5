package ui

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// browserHint says how to get the browser the page's test drives.
const browserHint = "the live page's test drives headless Chromium: apt-get install chromium chromium-driver"

// browser is a headless Chromium session driven over the W3C WebDriver
// protocol through chromedriver: a few JSON calls, no client library.
type browser struct {
	t       *testing.T
	base    string // chromedriver's URL
	session string
}

// newBrowser starts chromedriver on a free port and opens a headless
// session, both closed when the test ends. Missing programs fail the test
// with the install hint.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (%v): %s", err, browserHint)
	}
	driver, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Fatalf("chromedriver not found (%v): %s", err, browserHint)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, driver, "--port="+strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting chromedriver: %v (%s)", err, browserHint)
	}
	b := &browser{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	t.Cleanup(func() {
		if b.session != "" {
			b.call(http.MethodDelete, "/session/"+b.session, nil)
		}
		cancel()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := b.try(http.MethodGet, "/status", nil, &st); err == nil && st.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not get ready on port %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium,
			"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"}},
	}}}
	b.do(http.MethodPost, "/session", caps, &s)
	b.session = s.SessionID
	return b
}

// try makes one WebDriver call and decodes its "value" into out.
func (b *browser) try(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, raw)
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(env.Value, out)
}

func (b *browser) call(method, path string, body any) error { return b.try(method, path, body, nil) }

func (b *browser) do(method, path string, body, out any) {
	b.t.Helper()
	if err := b.try(method, path, body, out); err != nil {
		b.t.Fatalf("webdriver: %v", err)
	}
}

// open navigates to url.
func (b *browser) open(url string) {
	b.t.Helper()
	b.do(http.MethodPost, "/session/"+b.session+"/url", map[string]any{"url": url}, nil)
}

// eval runs script (a function body; arguments in `arguments`) in the
// page and decodes what it returns into out.
func (b *browser) eval(out any, script string, args ...any) {
	b.t.Helper()
	if args == nil {
		args = []any{}
	}
	b.do(http.MethodPost, "/session/"+b.session+"/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// screenshot returns the viewport as PNG.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var s string
	b.do(http.MethodGet, "/session/"+b.session+"/screenshot", nil, &s)
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}
