package rlqs

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The tests serve the Service on a real gRPC server on the loopback and
// talk to it with a real gRPC client, as Envoy does; the counters are in
// limit.Memory, the in-memory store, on a clock the test moves.

// epoch is a minute boundary: fixed windows of a minute start there.
var epoch = time.Unix(1_800_000_000, 0)

// clock is a clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func parseRules(t testing.TB, yaml string) *rules.Set {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(yaml)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// harness is a Service behind a gRPC server, and a client of it.
type harness struct {
	svc    *Service
	mem    *limit.Memory
	reg    *prometheus.Registry
	clock  *clock
	conn   *grpc.ClientConn
	client rlqspb.RateLimitQuotaServiceClient
}

// swapRules serves the rule set last stored, as a rules.Watcher serves
// the last one loaded: a reload is a Store.
type swapRules struct{ atomic.Pointer[rules.Set] }

func (s *swapRules) Current() *rules.Set { return s.Load() }

// serve starts a Service over set and mem with opts on a loopback gRPC
// server, stopped with the test. A nil opts.Now becomes the harness's
// clock; a nil mem a fresh Memory on it.
func serve(t testing.TB, set *rules.Set, mem *limit.Memory, opts Options) *harness {
	t.Helper()
	return serveRules(t, func() *rules.Set { return set }, mem, opts)
}

// serveRules is serve with the rules of rs.
func serveRules(t testing.TB, rs func() *rules.Set, mem *limit.Memory, opts Options) *harness {
	t.Helper()
	h := &harness{clock: &clock{t: epoch}, reg: prometheus.NewRegistry()}
	if opts.Now == nil {
		opts.Now = h.clock.Now
	}
	if mem == nil {
		mem = limit.NewMemory(limit.MemoryOptions{Now: opts.Now})
	}
	h.mem = mem
	m, err := NewMetrics(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = m
	if h.svc, err = New(rs, mem, opts); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(srv, h.svc)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn = conn
	h.client = rlqspb.NewRateLimitQuotaServiceClient(conn)
	return h
}

// qstream is one client stream, Envoy's side.
type qstream struct {
	t      testing.TB
	s      rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
	recv   chan recvd
}

type recvd struct {
	m   *rlqspb.RateLimitQuotaResponse
	err error
}

// open opens a stream named client.
func (h *harness) open(t testing.TB, client string) *qstream {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), ClientMetadata, client))
	s, err := h.client.StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	q := &qstream{t: t, s: s, cancel: cancel, recv: make(chan recvd, 64)}
	go func() {
		for {
			m, err := s.Recv()
			q.recv <- recvd{m, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return q
}

// use is one bucket's line of a report.
type use struct {
	bucket          map[string]string
	allowed, denied uint64
}

// report sends a report of domain.
func (q *qstream) report(domain string, uses ...use) {
	q.t.Helper()
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: domain}
	for _, u := range uses {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: u.bucket},
			TimeElapsed:        durationpb.New(0),
			NumRequestsAllowed: u.allowed,
			NumRequestsDenied:  u.denied,
		})
	}
	if err := q.s.Send(m); err != nil {
		q.t.Fatalf("send: %v", err)
	}
}

// next returns the next response, failing the test if none comes within
// timeout or the stream ends.
func (q *qstream) next(timeout time.Duration) *rlqspb.RateLimitQuotaResponse {
	q.t.Helper()
	select {
	case r := <-q.recv:
		if r.err != nil {
			q.t.Fatalf("recv: %v", r.err)
		}
		return r.m
	case <-time.After(timeout):
		q.t.Fatalf("no response within %v", timeout)
		return nil
	}
}

// end returns the error the stream ends with, within timeout.
func (q *qstream) end(timeout time.Duration) error {
	q.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case r := <-q.recv:
			if r.err != nil {
				return r.err
			}
		case <-deadline:
			q.t.Fatalf("the stream did not end within %v", timeout)
			return nil
		}
	}
}

// answer is one action of a response, in a form tests compare: "allow",
// "deny", "abandon" or "tb <tokens_per_fill>/<fill>s max <max_tokens>",
// with its bucket and time to live.
type answer struct {
	bucket map[string]string
	what   string
	ttl    time.Duration
}

func answers(r *rlqspb.RateLimitQuotaResponse) []answer {
	var out []answer
	for _, a := range r.GetBucketAction() {
		an := answer{bucket: a.GetBucketId().GetBucket()}
		if a.GetAbandonAction() != nil {
			an.what = "abandon"
			out = append(out, an)
			continue
		}
		q := a.GetQuotaAssignmentAction()
		an.ttl = q.GetAssignmentTimeToLive().AsDuration()
		st := q.GetRateLimitStrategy()
		switch {
		case st.GetTokenBucket() != nil:
			tb := st.GetTokenBucket()
			an.what = "tb " + itoa(int64(tb.GetTokensPerFill().GetValue())) + "/" + itoa(int64(tb.GetFillInterval().AsDuration()/time.Second)) + "s max " + itoa(int64(tb.GetMaxTokens()))
		case st.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
			an.what = "deny"
		default:
			an.what = "allow"
		}
		out = append(out, an)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// metric returns a counter's or gauge's value, by name and labels.
func (h *harness) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	var c prometheus.Collector
	m := h.svc.opts.Metrics
	switch name {
	case "streams":
		c = m.streams
	case "buckets":
		c = m.buckets
	case "reports":
		c = m.reports
	case "requests":
		c = m.usage.WithLabelValues(labels...)
	case "assignments":
		c = m.assignments.WithLabelValues(labels...)
	case "refused":
		c = m.refused.WithLabelValues(labels...)
	case "store_errors":
		c = m.storeErrors
	default:
		t.Fatalf("no metric %q", name)
	}
	return value(t, c)
}

// waitMetric waits until a counter or gauge (metric's name and labels)
// reaches at least want, and fails the test if it has not within wait.
func (h *harness) waitMetric(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	for deadline := time.Now().Add(wait); h.metric(t, name, labels...) < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s%q is %v after %v, want %v", name, labels, h.metric(t, name, labels...), wait, want)
		}
	}
}

// value reads the one series of c.
func value(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// remaining reads a counter of the Memory as RLS would, at cost 0.
func (h *harness) remaining(t testing.TB, key string, spec limit.Spec) int64 {
	t.Helper()
	d := make([]limit.Decision, 1)
	if _, err := h.mem.Evaluate(context.Background(), []limit.Hit{{Key: key, Spec: spec}}, d); err != nil {
		t.Fatal(err)
	}
	return d[0].Remaining
}
