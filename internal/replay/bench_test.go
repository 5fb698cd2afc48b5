package replay

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/rules"
)

const benchRules = `domain: bench
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: %d, algorithm: token_bucket, burst: 20}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: %d, algorithm: sliding_window}
`

// BenchmarkReplayMillion replays a day of a million requests (1000 client
// IPs, 50 API keys, two descriptors a request) through two rule sets.
// ns/request is per replayed request (both sets); s/replay the whole file.
func BenchmarkReplayMillion(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("REPLAY_BENCH_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	path := filepath.Join(b.TempDir(), "traffic.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	step := 24 * time.Hour / time.Duration(n)
	for i := range n {
		fmt.Fprintf(w, `{"time":%q,"domain":"bench","descriptors":[{"entries":[{"key":"ip","value":"10.0.%d.%d"}]},{"entries":[{"key":"api_key","value":"key%d"}]}]}`+"\n",
			t0.Add(time.Duration(i)*step).Format(time.RFC3339Nano), i%1000/250, i%250, i*7%50)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	parse := func(perSecond, perMinute int) *rules.Set {
		s, err := rules.Parse(map[string][]byte{"b.yaml": fmt.Appendf(nil, benchRules, perSecond, perMinute)}, rules.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	old, new := parse(10, 600), parse(5, 300)
	// As the binary runs (cmd/server's applyGCDefault).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rep, err := Run(context.Background(), old, new, one(f), Options{})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		if rep.Requests != n {
			b.Fatalf("replayed %d requests", rep.Requests)
		}
	}
	d := time.Since(start)
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N*n), "ns/request")
	b.ReportMetric(d.Seconds()/float64(b.N), "s/replay")
}
