package capture

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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// service is the service a server runs, on rules with one limit.
func service(t *testing.T) pb.RateLimitServiceServer {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"r.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func oneRequest(domain string, kv ...string) *pb.RateLimitRequest {
	return rlstest.Request(domain, rlstest.Desc(kv...))
}

func TestSampleKeepsWholeDescriptors(t *testing.T) {
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	c, err := New(service(t), path, Options{Sample: 0.25, Now: func() time.Time { return now }})
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

func TestMaxBytes(t *testing.T) {
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	// A file already holding 100 bytes counts them.
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 99)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	line := encodeLine(now, oneRequest("d", "k", "v"))
	max := int64(100 + 3*len(line) + len(line)/2)
	c, err := New(service(t), path, Options{MaxBytes: max, Now: func() time.Time { return now }})
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

func TestRefusesBadOptions(t *testing.T) {
	svc := service(t)
	dir := t.TempDir()
	for _, tt := range []struct {
		path string
		opts Options
		want string
	}{
		{filepath.Join(dir, "a"), Options{Sample: 1.5}, "Options.Sample 1.5: want a share in (0, 1]"},
		{filepath.Join(dir, "a"), Options{MaxBytes: -1}, "negative"},
		{filepath.Join(dir, "missing", "a"), Options{}, "no such file or directory"},
	} {
		if _, err := New(svc, tt.path, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.opts, err, tt.want)
		}
	}
}

// TestFileMode: the file a Recorder creates is its owner's alone, as
// it holds descriptor values (API keys, addresses); one that exists keeps
// its mode, with a warning when others may read it.
func TestFileMode(t *testing.T) {
	svc := service(t)
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
			c, err := New(svc, path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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

// TestTimesSortAsText: the times a Recorder writes have one width,
// whole seconds and round fractions included, so that the lines of
// several captures sort as text in time order.
func TestTimesSortAsText(t *testing.T) {
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
}
