package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/capture"
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
	c, err := capture.New(liveService(t, set, &now), path, capture.Options{Now: func() time.Time { return now }})
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

// TestReadCapturedTimes: a Reader reads the times a capture writes, of one
// width, as it reads times of any width.
func TestReadCapturedTimes(t *testing.T) {
	offsets := []time.Duration{0, 80 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Second + 5*time.Microsecond, 10 * time.Second}
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	c, err := capture.New(liveService(t, handRules(t, false), &now), path, capture.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range offsets {
		now = t0.Add(d)
		if _, err := c.ShouldRateLimit(context.Background(), oneRequest("d", "k", "v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	captured, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(strings.NewReader(string(captured) + `{"time":"2026-01-01T00:00:11Z","domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}` + "\n"))
	for i, d := range append(offsets, 11*time.Second) {
		req, err := r.Next()
		if err != nil || !req.Time.Equal(t0.Add(d)) || req.Line != i+1 {
			t.Errorf("line %d: %v at %v (line %d), want %v", i+1, err, req.Time, req.Line, t0.Add(d))
		}
	}
}

// TestReplayRefusedRequests: requests the server refused (no descriptors,
// an empty domain, an empty key) are in the capture as it served them; the
// replay has the service refuse them again, counts them invalid, and goes
// on, as production did.
func TestReplayRefusedRequests(t *testing.T) {
	set := handRules(t, false)
	now := t0
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	c, err := capture.New(liveService(t, set, &now), path, capture.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, req := range []*pb.RateLimitRequest{
		oneRequest("hand", "k", "gcra"),
		{Domain: "hand"},
		oneRequest("", "k", "gcra"),
		oneRequest("hand", "", "gcra"),
		oneRequest("hand", "k", "gcra"),
	} {
		now = now.Add(time.Millisecond)
		if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
			refused++
		}
	}
	if err := c.Close(); err != nil {
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
	if refused != 3 || rep.Requests != 5 || rep.Old.Invalid != refused || rep.Old.Allowed != 2 || rep.Changed.Total != 0 {
		t.Errorf("the server refused %d of 5; the replay: %d requests, old %+v, %d changed", refused, rep.Requests, rep.Old, rep.Changed.Total)
	}
}
