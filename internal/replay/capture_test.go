package replay

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// liveService is the service a server runs, on the hand rules and a clock
// the test moves.
func liveService(t *testing.T, set *rules.Set, now *time.Time) pb.RateLimitServiceServer {
	t.Helper()
	clock := func() time.Time { return *now }
	svc, err := envoy.New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{Now: clock}), envoy.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func oneRequest(domain string, kv ...string) *pb.RateLimitRequest {
	return rlstest.Request(domain, rlstest.Desc(kv...))
}

// TestCaptureThenReplay: what a server captured, replayed against the same
// rules, is decided as the server decided it.
func TestCaptureThenReplay(t *testing.T) {
	set := handRules(t, false)
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	c, err := NewCapture(liveService(t, set, &now), path, CaptureOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied int
	for _, s := range handTimes {
		now = t0.Add(time.Duration(s * float64(time.Second)))
		for _, hc := range handCases {
			resp, err := c.ShouldRateLimit(context.Background(), oneRequest("hand", "k", hc.algorithm))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
				denied++
			} else {
				allowed++
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Written != int64(len(handTimes)*len(handCases)) || st.Dropped != 0 || st.OverSize != 0 {
		t.Fatalf("stats %+v; want every request written", st)
	}
	// After Close, requests pass and are not recorded.
	if _, err := c.ShouldRateLimit(context.Background(), oneRequest("hand", "k", "gcra")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Run(context.Background(), set, set, one(f), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 32 allowed, 22 denied by hand (TestReplayHandComputed).
	if allowed != 32 || rep.Old.Allowed != allowed || rep.Old.Denied != denied || rep.Changed.Total != 0 || rep.Requests != 54 {
		t.Errorf("live %d allowed, %d denied; replay %+v, %d changed of %d", allowed, denied, rep.Old, rep.Changed.Total, rep.Requests)
	}
}

func TestCaptureSampleKeepsWholeDescriptors(t *testing.T) {
	set := handRules(t, false)
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	c, err := NewCapture(liveService(t, set, &now), path, CaptureOptions{Sample: 0.25, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	const clients, each = 400, 3
	for range each {
		for i := range clients {
			if _, err := c.ShouldRateLimit(context.Background(), oneRequest("other", "client", fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	perClient := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		perClient[l]++
	}
	// 100 clients expected; a binomial(400, 0.25) is within 60..140 but
	// for odds below 1e-9.
	if n := len(perClient); n < 60 || n > 140 {
		t.Errorf("%d of %d clients kept at 0.25", n, clients)
	}
	for l, n := range perClient {
		if n != each {
			t.Errorf("%d of %d requests kept of %s", n, each, l)
		}
	}
}

func TestCaptureMaxBytes(t *testing.T) {
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	// A file already holding 100 bytes counts them.
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 99)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	line := encodeLine(now, oneRequest("d", "k", "v"))
	max := int64(100 + 3*len(line) + len(line)/2)
	c, err := NewCapture(liveService(t, handRules(t, false), &now), path, CaptureOptions{MaxBytes: max, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		c.ShouldRateLimit(context.Background(), oneRequest("d", "k", "v"))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); fi.Size() != int64(100+3*len(line)) || st.Written != 3 || st.OverSize != 7 {
		t.Errorf("file of %d bytes (max %d), stats %+v; want 3 lines written, 7 over the size", fi.Size(), max, st)
	}
}

func TestCaptureRefusesBadOptions(t *testing.T) {
	now := t0
	svc := liveService(t, handRules(t, false), &now)
	dir := t.TempDir()
	for _, tt := range []struct {
		path string
		opts CaptureOptions
		want string
	}{
		{filepath.Join(dir, "a"), CaptureOptions{Sample: 1.5}, "CaptureOptions.Sample 1.5: want a share in (0, 1]"},
		{filepath.Join(dir, "a"), CaptureOptions{MaxBytes: -1}, "negative"},
		{filepath.Join(dir, "missing", "a"), CaptureOptions{}, "no such file or directory"},
	} {
		if _, err := NewCapture(svc, tt.path, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.opts, err, tt.want)
		}
	}
}

// TestCaptureFileMode: the file Capture creates is its owner's alone, as
// it holds descriptor values (API keys, addresses); one that exists keeps
// its mode, with a warning when others may read it.
func TestCaptureFileMode(t *testing.T) {
	now := t0
	svc := liveService(t, handRules(t, false), &now)
	dir := t.TempDir()
	for _, tt := range []struct {
		name     string
		existing os.FileMode // 0: none
		want     os.FileMode
		warned   bool
	}{
		{"new", 0, 0o600, false},
		{"existing 0644", 0o644, 0o644, true},
		{"existing 0600", 0o600, 0o600, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if tt.existing != 0 {
				if err := os.WriteFile(path, nil, tt.existing); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.existing); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			var logs strings.Builder
			c, err := NewCapture(svc, path, CaptureOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tt.want {
				t.Errorf("mode %04o, want %04o", fi.Mode().Perm(), tt.want)
			}
			if got := strings.Contains(logs.String(), "may be read by others"); got != tt.warned {
				t.Errorf("warned %v, want %v:\n%s", got, tt.warned, logs.String())
			}
		})
	}
}

// TestCaptureTimesSortAsText: the times Capture writes have one width,
// whole seconds and round fractions included, so that the lines of
// several captures sort as text in time order; and a Reader reads them,
// as it reads times of any width.
func TestCaptureTimesSortAsText(t *testing.T) {
	offsets := []time.Duration{0, 80 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Second + 5*time.Microsecond, 10 * time.Second}
	var lines []string
	for _, d := range offsets {
		lines = append(lines, string(encodeLine(t0.Add(d), oneRequest("d", "k", "v"))))
	}
	width := strings.Index(lines[0], `","domain"`)
	for i, l := range lines {
		if w := strings.Index(l, `","domain"`); w != width {
			t.Errorf("line %d %q: the time ends at %d, line 1's at %d", i+1, l, w, width)
		}
	}
	if !strings.HasPrefix(lines[1], `{"time":"2026-01-01T00:00:00.080000Z",`) {
		t.Errorf("line 2 is %q, want the time 2026-01-01T00:00:00.080000Z", lines[1])
	}
	shuffled := slices.Clone(lines)
	slices.Reverse(shuffled)
	slices.Sort(shuffled)
	if !slices.Equal(shuffled, lines) {
		t.Errorf("sorted as text:\n%s\nnot in time order:\n%s", strings.Join(shuffled, ""), strings.Join(lines, ""))
	}
	r := NewReader(strings.NewReader(strings.Join(lines, "") + `{"time":"2026-01-01T00:00:11Z","domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}` + "\n"))
	for i, d := range append(offsets, 11*time.Second) {
		req, err := r.Next()
		if err != nil || !req.Time.Equal(t0.Add(d)) || req.Line != i+1 {
			t.Errorf("line %d: %v at %v (line %d), want %v", i+1, err, req.Time, req.Line, t0.Add(d))
		}
	}
}
