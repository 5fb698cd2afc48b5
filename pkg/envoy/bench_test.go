package envoy_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/racebuild"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/internal/tracing"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The request path's cost, measured as the binary runs it: with its
// metrics (internal/rlsmetrics), hence in package envoy_test.

// benchRules are cmd/bench's generated rules: keys that match any value,
// one limit each, never reached.
const benchRules = `
domain: bench
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: key2
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: key3
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkHandler measures the handler's CPU and allocations per request
// on the in-memory twin with metrics on, for cmd/bench's under-limit
// scenarios: 1 and 3 descriptors, 1,000 values per key. The store's own
// cost is included (limit.Memory's benchmark gives it alone). The _statsd
// runs also count in statsd (never flushed during the run: counting is
// what a request pays). Logs go through a text handler at info level, as
// in production, so that the runs include what the debug line costs when
// debug is off; the _debug runs turn it on (to io.Discard). The _charge
// runs send the same descriptors as usage reports (a descriptor's own
// hits_addend of 1, as Envoy charges at stream done), to compare a
// charge's cost with a decision's.
func BenchmarkHandler(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, withStatsd := range []bool{false, true} {
			name := strconv.Itoa(n) + "desc"
			if withStatsd {
				name += "_statsd"
			}
			b.Run(name, func(b *testing.B) { benchmarkHandler(b, n, withStatsd, slog.LevelInfo, true) })
		}
		b.Run(strconv.Itoa(n)+"desc_charge", func(b *testing.B) { benchmarkCharges(b, n) })
		b.Run(strconv.Itoa(n)+"desc_debug", func(b *testing.B) { benchmarkHandler(b, n, false, slog.LevelDebug, true) })
		// A caller without a deadline, or with one further than the store
		// deadline (cmd/bench's load, a gRPC client without a timeout,
		// Envoy with a longer filter timeout).
		b.Run(strconv.Itoa(n)+"desc_nodeadline", func(b *testing.B) { benchmarkHandler(b, n, false, slog.LevelInfo, false) })
	}
}

func benchmarkHandler(b *testing.B, n int, withStatsd bool, level slog.Level, deadline bool) {
	svc, all := benchService(b, n, withStatsd, level, limit.NewMemory(limit.MemoryOptions{}))
	runHandler(b, svc, all, deadline)
}

// benchmarkCharges is benchmarkHandler for usage reports of 1.
func benchmarkCharges(b *testing.B, n int) {
	svc, all := benchService(b, n, false, slog.LevelInfo, limit.NewMemory(limit.MemoryOptions{}))
	charge(all)
	runHandler(b, svc, all, true)
}

// charge makes every descriptor of all a usage report of 1 (a
// descriptor's own hits_addend).
func charge(all []*pb.RateLimitRequest) {
	for _, r := range all {
		for _, d := range r.Descriptors {
			d.HitsAddend = wrapperspb.UInt64(1)
		}
	}
}

// runHandler sends all to svc in turn for b.N requests.
func runHandler(b *testing.B, svc *envoy.Service, all []*pb.RateLimitRequest, deadline bool) {
	// A call from Envoy carries its filter's timeout (20 ms by default)
	// as grpc-timeout, which gRPC turns into the call's context. Such a
	// context is renewed every 100 requests, so that its allocations,
	// gRPC's, stay out of the count while the service sees Envoy's
	// deadline as in production. Without deadline, the context is
	// gRPC's without grpc-timeout: cancellable, with no deadline.
	ctx, cancel := context.WithCancel(context.Background())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if deadline && i%100 == 0 {
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
		}
		resp, err := svc.ShouldRateLimit(ctx, all[i%len(all)])
		if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
		i++
	}
	cancel()
}

// TestHandlerAllocations holds the request path to two allocations per
// request (the counter keys' string and the answer) whatever the number of
// descriptors, with metrics and statsd on and debug logging off; decoding
// is the gRPC codec's (wireRequest: one more). Under -race, where pools
// drop items at random, it only runs the path; `make test` runs it again
// without.
func TestHandlerAllocations(t *testing.T) {
	for _, c := range []struct {
		n      int
		charge bool
	}{{1, false}, {3, false}, {1, true}, {3, true}} {
		// On a stopped clock: the rules' windows are a second long, and a
		// second's boundary between the warm-up and the count would make
		// the store create every counter again.
		stopped := time.Now()
		store := limit.NewMemory(limit.MemoryOptions{Now: func() time.Time { return stopped }})
		svc, all := benchService(t, c.n, true, slog.LevelInfo, store)
		if c.charge {
			charge(all)
		}
		// Every counter exists, as in a steady state: the store's first
		// hit on a key allocates its entry.
		for _, req := range all {
			if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
		// A deadline, as Envoy sends one, but one a busy machine cannot
		// reach during the count: an expired request takes the failure path,
		// which allocates.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		i := 0
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := svc.ShouldRateLimit(ctx, all[i%len(all)]); err != nil {
				t.Fatal(err)
			}
			i++
		})
		cancel()
		if allocs > 2 && !racebuild.Enabled {
			t.Errorf("%d descriptors (usage reports: %v): %v allocations per request, want at most 2", c.n, c.charge, allocs)
		}
	}
}

// benchService is a Service as cmd/bench's server runs it, on store,
// with the binary's metrics, and requests of n descriptors over 1,000
// values.
func benchService(tb testing.TB, n int, withStatsd bool, level slog.Level, store limit.Limiter) (*envoy.Service, []*pb.RateLimitRequest) {
	tb.Helper()
	opts := rlsmetrics.Options{Store: "memory"}
	if withStatsd {
		client, err := statsd.New(statsd.Options{Addr: statsdtest.Listen(tb).Addr(), FlushInterval: time.Hour})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { client.Close() })
		opts.Statsd = client
	}
	m, err := rlsmetrics.New(prometheus.NewRegistry(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	svc := newBenchService(tb, store, envoy.Options{Metrics: m, Logger: logger})
	// Requests are built beforehand, as gRPC hands the handler a
	// decoded message.
	const values = 1000
	all := make([]*pb.RateLimitRequest, values)
	for v := range all {
		all[v] = &pb.RateLimitRequest{Domain: "bench"}
		for k := 1; k <= n; k++ {
			all[v].Descriptors = append(all[v].Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
				{Key: "key" + strconv.Itoa(k), Value: "v" + strconv.Itoa(v)}}})
		}
	}
	return svc, all
}

// newBenchService is a Service on benchRules and store.
func newBenchService(tb testing.TB, store limit.Limiter, opts envoy.Options) *envoy.Service {
	tb.Helper()
	set, err := rules.Parse(map[string][]byte{"bench.yaml": []byte(benchRules)}, rules.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := envoy.New(setSource{set}.Current, store, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}

// setSource serves one Set, through its Current method.
type setSource struct{ set *rules.Set }

func (s setSource) Current() *rules.Set { return s.set }

// BenchmarkHandlerTraced is BenchmarkHandler's 1desc run (without metrics)
// with tracing on, exporting to a real OTLP receiver: what a sampled
// request costs, and one whose caller's traceparent says not sampled.
// BenchmarkHandler itself is the cost with tracing off.
func BenchmarkHandlerTraced(b *testing.B) {
	for _, tc := range []struct {
		name        string
		traceparent string
	}{
		{"sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rcv := otlptest.Start(b)
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.GRPCEndpoint())
			tr, err := tracing.New(context.Background(), tracing.Options{Protocol: tracing.ProtocolGRPC, SamplingRate: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			svc := newBenchService(b, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{TracerProvider: tr.Provider()})
			req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "key1", Value: "v"}}}}}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tc.traceparent))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
