package memcachelimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// BenchmarkEvaluate decides calls of 1 and 3 fixed-window hits from
// parallel callers against one memcached, over loopback, on counters that
// never fill (every call one round trip), and on one full counter (every
// call refused: two round trips). Run with
// go test -run '^$' -bench . ./internal/memcachelimit
func BenchmarkEvaluate(b *testing.B) {
	cases := []struct {
		name  string
		hits  int
		limit int64
	}{
		{"1 hit allowed", 1, 1 << 40},
		{"3 hits allowed", 3, 1 << 40},
		{"1 hit refused", 1, 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := memcachedtest.Start(b)
			l, err := memcachelimit.New(context.Background(), memcachelimit.Options{Servers: []string{s.Addr}, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var caller atomic.Int64
			b.SetParallelism(8) // 16 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.FormatInt(caller.Add(1), 10)
				hits := make([]limit.Hit, c.hits)
				for i := range hits {
					hits[i] = limit.Hit{Key: id + "/" + strconv.Itoa(i), Spec: fixed(c.limit, time.Hour), Cost: 1}
				}
				ds := make([]limit.Decision, len(hits))
				for pb.Next() {
					if _, err := l.Evaluate(context.Background(), hits, ds); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
