package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
	"github.com/floodgate/floodgate/internal/rlqs"
)

// The simulated Envoys are held to the real one: the same requests go
// through Envoy 1.40 running the shipped examples and through a simulated
// Envoy, each against a server that records what it is sent, and the
// recordings must match.

// recorder is an RLS and RLQS server that records what it is sent and
// answers nothing but RLS's OK.
type recorder struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	pb.UnimplementedRateLimitServiceServer
	mu      sync.Mutex
	streams map[string]*recordedStream // by x-rlqs-client
	calls   []*pb.RateLimitRequest
}

// recordedStream is one RLQS stream's reports.
type recordedStream struct {
	opened time.Time
	at     []time.Time
	msgs   []*rlqspb.RateLimitQuotaUsageReports
}

func (r *recorder) StreamRateLimitQuotas(s rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	client := strings.Join(md.Get(rlqs.ClientMetadata), ",")
	rs := &recordedStream{opened: time.Now()}
	r.mu.Lock()
	r.streams[client] = rs
	r.mu.Unlock()
	for {
		m, err := s.Recv()
		if err != nil {
			return nil
		}
		r.mu.Lock()
		rs.at, rs.msgs = append(rs.at, time.Now()), append(rs.msgs, m)
		r.mu.Unlock()
	}
}

func (r *recorder) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	r.mu.Lock()
	r.calls = append(r.calls, req)
	r.mu.Unlock()
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// startRecorder serves a recorder on the loopback until the test ends.
func startRecorder(t *testing.T) (*recorder, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{streams: map[string]*recordedStream{}}
	srv := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(srv, r)
	pb.RegisterRateLimitServiceServer(srv, r)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return r, l.Addr().String()
}

// startExampleEnvoy runs the shipped bootstrap at path with its backend
// and floodgate clusters pointed at a test backend and addr, and returns
// its HTTP listener's URL.
func startExampleEnvoy(t *testing.T, path, addr string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(backend.Close)
	e := envoytest.Start(t, envoytest.Config{Bootstrap: raw,
		Upstreams: map[string][]string{backendCluster: {backend.Listener.Addr().String()}, floodgateCluster: {addr}}})
	return "http://" + e.Listener(envoyListener)
}

// get sends GET / with the API key to url.
func get(t *testing.T, url, key string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// quotaScript is the requests both Envoys take: at each offset, the keys
// in order.
var quotaScript = []struct {
	at   time.Duration
	keys []string
}{
	{0, []string{"k1", "k1", "k1", "k2"}},
	{2 * time.Second, []string{"k3", "k1", "k3", "k1", "k3"}},
}

// TestQuotaEnvoyMatchesEnvoy holds the simulated RLQS Envoy to Envoy 1.40
// with examples/envoy-rlqs.yaml: a new bucket reported at once alone, the
// periodic report of every bucket 5 s after the stream opened, the counts
// and elapsed seconds of each.
func TestQuotaEnvoyMatchesEnvoy(t *testing.T) {
	rec, addr := startRecorder(t)
	url := startExampleEnvoy(t, "../../examples/envoy-rlqs.yaml", addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := grpc.NewClient(addr, asEnvoy()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fl := newQuotaFleet(newDemand(4, 1, 1, 0), newFleetCounts(4, time.Second), "demo")
	sim := newQuotaEnvoy(fl, 0, 1, conn, rand.Uint64())
	var wg sync.WaitGroup
	wg.Go(func() { driveSimulated(ctx, sim) })
	start := time.Now()
	for _, step := range quotaScript {
		time.Sleep(time.Until(start.Add(step.at)))
		for _, k := range step.keys {
			get(t, url, k)
		}
	}
	waitPeriodic(t, rec, []string{"front-envoy", sim.name})
	cancel()
	wg.Wait()
	real, simulated := rec.shapes(t, "front-envoy"), rec.shapes(t, sim.name)
	if len(real) != len(simulated) {
		t.Fatalf("Envoy sent %d reports:\n%s\nthe simulated one %d:\n%s", len(real), strings.Join(real, "\n"), len(simulated), strings.Join(simulated, "\n"))
	}
	for i := range real {
		if !sameShape(real[i], simulated[i]) {
			t.Errorf("report %d: Envoy sent\n  %s\nthe simulated one\n  %s", i, real[i], simulated[i])
		}
	}
}

// driveSimulated takes quotaScript's requests on the simulated Envoy and
// runs its ticks, as its run loop does, until ctx ends.
func driveSimulated(ctx context.Context, e *quotaEnvoy) {
	start := time.Now()
	next := 0
	tick := time.NewTicker(fleetTick)
	defer tick.Stop()
	defer e.close()
	for {
		now := time.Now()
		e.mu.Lock()
		for next < len(quotaScript) && !now.Before(start.Add(quotaScript[next].at)) {
			for _, k := range quotaScript[next].keys {
				e.request(int(k[1]-'0'), now)
			}
			next++
		}
		e.mu.Unlock()
		e.sendReports(ctx, now)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitPeriodic waits until every client's stream has sent a report 5 s
// or more after it opened.
func waitPeriodic(t *testing.T, rec *recorder, clients []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		rec.mu.Lock()
		done := 0
		for _, c := range clients {
			if s := rec.streams[c]; s != nil && len(s.at) > 0 && s.at[len(s.at)-1].Sub(s.opened) >= quotaReportEvery-100*time.Millisecond {
				done++
			}
		}
		rec.mu.Unlock()
		if done == len(clients) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no periodic report from every one of %q", clients)
}

// shapes returns a client's reports as text: when each came after the
// stream opened, rounded to the report interval (0 or 1), its domain and
// its usages sorted by bucket, each with its counts and elapsed seconds.
func (r *recorder) shapes(t *testing.T, client string) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.streams[client]
	if s == nil {
		t.Fatalf("no stream from %s", client)
	}
	var out []string
	for i, m := range s.msgs {
		var us []string
		for _, u := range m.GetBucketQuotaUsages() {
			us = append(us, fmt.Sprintf("%v allowed=%d denied=%d elapsed=%ds", u.GetBucketId().GetBucket(),
				u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().GetSeconds()))
		}
		sort.Strings(us)
		tick := (s.at[i].Sub(s.opened) + quotaReportEvery/2) / quotaReportEvery
		out = append(out, fmt.Sprintf("tick %d domain %q: %s", tick, m.GetDomain(), strings.Join(us, "; ")))
	}
	return out
}

// sameShape compares two reports' text, the elapsed seconds within one:
// they are truncated, and the simulated Envoy's ticks come up to 50 ms
// after the real one's timer.
func sameShape(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	if len(fa) != len(fb) {
		return false
	}
	for i := range fa {
		ea, okA := strings.CutPrefix(fa[i], "elapsed=")
		eb, okB := strings.CutPrefix(fb[i], "elapsed=")
		if okA && okB {
			var x, y int
			fmt.Sscanf(ea, "%ds", &x)
			fmt.Sscanf(eb, "%ds", &y)
			if x-y > 1 || y-x > 1 {
				return false
			}
			continue
		}
		if fa[i] != fb[i] {
			return false
		}
	}
	return true
}

// TestRLSEnvoyMatchesEnvoy holds the simulated RLS Envoy's request to
// what Envoy 1.40 sends with examples/envoy.yaml for a request with an API
// key: the example sends more descriptors (the client's address, its
// user agent), and among them the one the fleet sends, with the same
// domain and no hits_addend.
func TestRLSEnvoyMatchesEnvoy(t *testing.T) {
	rec, addr := startRecorder(t)
	url := startExampleEnvoy(t, "../../examples/envoy.yaml", addr)
	get(t, url, "k7")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 {
		t.Fatalf("Envoy made %d calls for one request, want 1", len(rec.calls))
	}
	got, want := rec.calls[0], rlsRequest("demo", "k7")
	if got.GetDomain() != want.GetDomain() || got.GetHitsAddend() != want.GetHitsAddend() {
		t.Errorf("Envoy sent domain %q, hits_addend %d; the fleet sends %q, %d", got.GetDomain(), got.GetHitsAddend(), want.GetDomain(), want.GetHitsAddend())
	}
	if !slices.ContainsFunc(got.GetDescriptors(), func(d *rlv3.RateLimitDescriptor) bool { return proto.Equal(d, want.GetDescriptors()[0]) }) {
		t.Errorf("Envoy sent %v, without the fleet's descriptor %v", got.GetDescriptors(), want.GetDescriptors()[0])
	}
}
