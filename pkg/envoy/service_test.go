package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// testRules covers every feature the service handles; each case uses the
// keys it needs.
const testRules = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: burst}
      - {unit: day, requests_per_unit: 2, name: daily}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 10, name: premium, replaces: [{name: standard}]}
  - key: standard
    rate_limit: {unit: minute, requests_per_unit: 1, name: standard}
  - key: slide
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window, precision: 6}
  - key: strict
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ask
    failure_mode: unavailable
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: token_bucket, burst: 1}
  - key: multi
    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 30}
  - key: slidelog
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: meta_a
    metadata: {team: a, nested: {x: 1}}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: meta_b
    metadata: {team: b, nested: {y: [2, true]}, extra: null}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: meta_nolimit
    metadata: {nolimit: true}
  - key: meta_over
    metadata: {over: true}
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: meta_replaced
    metadata: {team: replaced}
    rate_limit: {unit: minute, requests_per_unit: 5, name: meta_replaced}
  - key: meta_replacer
    metadata: {team: replacer, other: {a: 1}}
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: meta_replaced}]}
`

// t0 is 10 s into a minute, so minute windows reset in 50 s.
var t0 = time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)

// fixedRules serves one Set, through its Current method.
type fixedRules struct{ set *rules.Set }

func (f fixedRules) Current() *rules.Set { return f.set }

type harness struct {
	svc *Service
	mem *limit.Memory
	now time.Time
}

// testStoreTimeout is the store deadline of tests that count decisions: on
// a busy machine a goroutine can wait longer than limit.DefaultDeadline
// for a core, and a request then answered by the failure policy would be
// counted as lost. The tests of deadlines set their own.
const testStoreTimeout = 10 * time.Second

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	h := &harness{now: t0}
	h.mem = limit.NewMemory(limit.MemoryOptions{Now: func() time.Time { return h.now }})
	if opts.Now == nil {
		opts.Now = func() time.Time { return h.now }
	}
	if h.svc, err = New(fixedRules{set}.Current, h.mem, opts); err != nil {
		t.Fatal(err)
	}
	return h
}

var (
	desc    = rlstest.Desc
	request = rlstest.Request
)

func withAddend(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

func refund(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.IsNegativeHits = true
	return d
}

// summary writes a status as CODE:remaining, with "-" for no current_limit
// and "max" for an unlimited descriptor.
func summary(st *pb.RateLimitResponse_DescriptorStatus) string {
	code := strings.TrimSuffix(st.Code.String(), "_LIMIT")
	switch {
	case st.CurrentLimit == nil && st.LimitRemaining == math.MaxUint32:
		return code + ":max"
	case st.CurrentLimit == nil:
		return code + ":-"
	}
	return fmt.Sprintf("%s:%d", code, st.LimitRemaining)
}

func summaries(resp *pb.RateLimitResponse) string {
	var s []string
	for _, st := range resp.Statuses {
		s = append(s, summary(st))
	}
	return strings.Join(s, " ")
}

// step is one call and what it must answer: the overall code ("OK",
// "OVER") then the statuses.
type step struct {
	req   *pb.RateLimitRequest
	want  string
	check func(t *testing.T, resp *pb.RateLimitResponse)
	// advance moves the clock before the call.
	advance time.Duration
}

func TestShouldRateLimit(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		steps []step
	}{
		{name: "a fixed window counts per key-only value and rejects past its limit", steps: []step{
			{req: request("test", desc("user", "alice")), want: "OK OK:2"},
			{req: request("test", desc("user", "alice")), want: "OK OK:1"},
			{req: request("test", desc("user", "alice")), want: "OK OK:0"},
			{req: request("test", desc("user", "alice")), want: "OVER OVER:0"},
			{req: request("test", desc("user", "bob")), want: "OK OK:2"},
			{req: request("test", desc("user", "alice")), advance: 50 * time.Second, want: "OK OK:2"},
		}},
		{name: "one status per descriptor in request order; no limit, whitelist and unlimited", steps: []step{
			{req: request("test", desc("user", "a"), desc("nomatch", "x"), desc("open", "x"), desc("free", "x"), desc("user", "a", "extra", "y")),
				want: "OK OK:2 OK:- OK:- OK:max OK:-"},
		}},
		{name: "current_limit and duration_until_reset", steps: []step{
			{req: request("test", desc("user", "a")), want: "OK OK:2", check: func(t *testing.T, resp *pb.RateLimitResponse) {
				st := resp.Statuses[0]
				if got := st.CurrentLimit; got.RequestsPerUnit != 3 || got.Unit != pb.RateLimitResponse_RateLimit_MINUTE || got.GetUnitMultiplier() != nil || got.Name != "" {
					t.Errorf("current_limit = %v", got)
				}
				if got := st.DurationUntilReset.AsDuration(); got != 50*time.Second {
					t.Errorf("duration_until_reset = %v, want 50s", got)
				}
			}},
		}},
		{name: "request hits_addend: 0 means 1, n counts n, and a rejected request consumes nothing", steps: []step{
			{req: &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "c")}, HitsAddend: 0}, want: "OK OK:2"},
			{req: &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "c")}, HitsAddend: 3}, want: "OVER OVER:0"},
			{req: &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "c")}, HitsAddend: 2}, want: "OK OK:0"},
		}},
		{name: "descriptor hits_addend wins over the request's; 0 looks without counting", steps: []step{
			{req: &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{withAddend(desc("user", "d"), 2)}, HitsAddend: 1}, want: "OK OK:1"},
			{req: request("test", withAddend(desc("user", "d"), 0)), want: "OK OK:1"},
			{req: request("test", withAddend(desc("user", "d"), 0)), want: "OK OK:1"},
			{req: request("test", desc("user", "d")), want: "OK OK:0"},
			{req: request("test", withAddend(desc("user", "d"), 0)), want: "OK OK:0"},
		}},
		{name: "is_negative_hits gives budget back", steps: []step{
			{req: request("test", withAddend(desc("user", "e"), 3)), want: "OK OK:0"},
			{req: request("test", refund(withAddend(desc("user", "e"), 2))), want: "OK OK:2"},
			{req: request("test", desc("user", "e")), want: "OK OK:1"},
		}},
		{name: "a limit override replaces the rule's limit and counts apart", steps: []step{
			{req: request("test", withOverride(desc("user", "f"), 1, typev3.RateLimitUnit_HOUR, 0)), want: "OK OK:0", check: func(t *testing.T, resp *pb.RateLimitResponse) {
				if got := resp.Statuses[0].CurrentLimit; got.RequestsPerUnit != 1 || got.Unit != pb.RateLimitResponse_RateLimit_HOUR {
					t.Errorf("current_limit = %v, want 1 per hour", got)
				}
			}},
			{req: request("test", withOverride(desc("user", "f"), 1, typev3.RateLimitUnit_HOUR, 0)), want: "OVER OVER:0"},
			// The rule's own counter is untouched, and another override
			// window is another counter.
			{req: request("test", desc("user", "f")), want: "OK OK:2"},
			{req: request("test", withOverride(desc("user", "f"), 1, typev3.RateLimitUnit_MINUTE, 0)), want: "OK OK:0"},
		}},
		{name: "an override's unit_multiplier sets its window", steps: []step{
			{req: request("test", withOverride(desc("user", "g"), 5, typev3.RateLimitUnit_MINUTE, 2)), want: "OK OK:4", check: func(t *testing.T, resp *pb.RateLimitResponse) {
				st := resp.Statuses[0]
				if got := st.CurrentLimit.GetUnitMultiplier().GetValue(); got != 2 {
					t.Errorf("unit_multiplier = %d, want 2", got)
				}
				// Two-minute windows start at even minutes: 00:00:10 ends at 00:02:00.
				if got := st.DurationUntilReset.AsDuration(); got != 110*time.Second {
					t.Errorf("duration_until_reset = %v, want 1m50s", got)
				}
			}},
		}},
		{name: "an override applies in a known domain without a matching rule", steps: []step{
			{req: request("test", withOverride(desc("nomatch", "x"), 1, typev3.RateLimitUnit_MINUTE, 0)), want: "OK OK:0"},
			{req: request("test", withOverride(desc("nomatch", "x"), 1, typev3.RateLimitUnit_MINUTE, 0)), want: "OVER OVER:0"},
			{req: request("test", withOverride(desc("nomatch", "y"), 1, typev3.RateLimitUnit_MINUTE, 0)), want: "OK OK:0"},
		}},
		{name: "unknown domain: OK for every descriptor, overrides included", steps: []step{
			{req: request("other", desc("user", "a"), withOverride(desc("user", "a"), 0, typev3.RateLimitUnit_MINUTE, 0)), want: "OK OK:- OK:-"},
		}},
		{name: "all or nothing: a descriptor over its limit consumes nothing elsewhere", steps: []step{
			{req: request("test", desc("user", "h"), desc("zero", "x")), want: "OVER OK:3 OVER:0"},
			{req: request("test", desc("user", "h"), desc("zero", "x")), want: "OVER OK:3 OVER:0"},
			{req: request("test", desc("user", "h")), want: "OK OK:2"},
		}},
		{name: "replaces drops the named limit across the request", steps: []step{
			{req: request("test", desc("premium", "x"), desc("standard", "x")), want: "OK OK:9 OK:-"},
			{req: request("test", desc("premium", "x"), desc("standard", "x")), want: "OK OK:8 OK:-"},
			{req: request("test", desc("standard", "x")), want: "OK OK:0"},
			{req: request("test", desc("standard", "x")), want: "OVER OVER:0"},
		}},
		{name: "several limits on a descriptor report the most restrictive", steps: []step{
			{req: request("test", desc("tenant", "t")), want: "OK OK:1", check: wantLimitName("daily")},
			{req: request("test", desc("tenant", "t")), want: "OK OK:0", check: wantLimitName("daily")},
			{req: request("test", desc("tenant", "t")), want: "OVER OVER:0", check: wantLimitName("daily")},
		}},
		{name: "per-rule shadow mode answers OK and lets the other limits count", steps: []step{
			{req: request("test", desc("shadow", "s")), want: "OK OK:0"},
			{req: request("test", desc("shadow", "s"), desc("user", "i")), want: "OK OK:0 OK:2"},
			{req: request("test", desc("shadow", "s"), desc("user", "i")), want: "OK OK:0 OK:1"},
		}},
		{name: "global shadow mode answers OK overall, keeps statuses, and counts as when enforcing", opts: Options{ShadowMode: true}, steps: []step{
			{req: request("test", withAddend(desc("user", "j"), 3)), want: "OK OK:0"},
			{req: request("test", desc("user", "j"), desc("ip", "1")), want: "OK OVER:0 OK:1"},
			{req: request("test", desc("ip", "1")), want: "OK OK:0"},
		}},
		{name: "quota mode: OVER_LIMIT only when every quota descriptor is over", steps: []step{
			{req: request("test", desc("quota_a", "x")), want: "OK OK:0", check: wantNoMetadata},
			// quota_a is over but quota_b is not: the request passes and is
			// charged to the limits that allowed it.
			{req: request("test", desc("quota_a", "x"), desc("quota_b", "y"), desc("user", "k")), want: "OK OVER:0 OK:0 OK:2", check: wantNoMetadata},
			{req: request("test", desc("user", "k")), want: "OK OK:1"},
			{req: request("test", desc("quota_a", "x"), desc("quota_b", "y")), want: "OVER OVER:0 OVER:0", check: wantNoMetadata},
			{req: request("test", desc("quota_a", "x"), desc("user", "k")), want: "OVER OVER:0 OK:1", check: wantNoMetadata},
		}},
		{name: "requests_per_unit 0 blocks", steps: []step{
			{req: request("test", desc("zero", "x")), want: "OVER OVER:0"},
		}},
		{name: "sliding window keeps the rule's algorithm", steps: []step{
			{req: request("test", desc("slide", "x")), want: "OK OK:1"},
			{req: request("test", desc("slide", "x")), want: "OK OK:0"},
			// A fixed window would have reset at the minute; a sliding one
			// still counts most of the last minute.
			{req: request("test", desc("slide", "x")), advance: 55 * time.Second, want: "OVER OVER:0"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			for i, s := range tc.steps {
				h.now = h.now.Add(s.advance)
				resp, err := h.svc.ShouldRateLimit(context.Background(), s.req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp)
				if got != s.want {
					t.Fatalf("step %d: got %q, want %q", i, got, s.want)
				}
				if s.check != nil {
					s.check(t, resp)
				}
			}
		})
	}
}

func wantLimitName(name string) func(t *testing.T, resp *pb.RateLimitResponse) {
	return func(t *testing.T, resp *pb.RateLimitResponse) {
		t.Helper()
		if got := resp.Statuses[0].GetCurrentLimit().GetName(); got != name {
			t.Errorf("current_limit.name = %q, want %q", got, name)
		}
	}
}

// wantNoMetadata: without Options.DynamicMetadata an answer carries none,
// as the reference server's, quota mode or not.
func wantNoMetadata(t *testing.T, resp *pb.RateLimitResponse) {
	t.Helper()
	if md := resp.GetDynamicMetadata(); md != nil {
		t.Errorf("dynamic_metadata = %v, want none without Options.DynamicMetadata", md.AsMap())
	}
}

func TestInvalidRequests(t *testing.T) {
	h := newHarness(t, Options{})
	tests := []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"empty domain", request("", desc("user", "a")), "domain: must not be empty"},
		{"no descriptors", request("test"), "descriptors: must not be empty"},
		{"unknown override unit", request("test", desc("user", "a"), withOverride(desc("user", "a"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), "descriptors[1].limit: unit UNKNOWN"},
		{"zero unit_multiplier", request("test", withOverride(desc("user", "a"), 1, typev3.RateLimitUnit_SECOND, 0)), ""},
		{"a window too long for a duration", request("test", withOverride(desc("user", "a"), 1, typev3.RateLimitUnit_YEAR, 1000)), "descriptors[0].limit.unit_multiplier: 1000 years is longer"},
		{"an override past a rule's bounds", request("test", withOverride(desc("slidelog", "a"), 5000, typev3.RateLimitUnit_MINUTE, 1)), "descriptors[0].limit.requests_per_unit: sliding_log of 5000 per window"},
	}
	tests[3].req.Descriptors[0].Limit.UnitMultiplier = wrapperspb.UInt32(0)
	tests[3].want = "descriptors[0].limit.unit_multiplier: must be at least 1"
	many := func(n int, make func(i int) *rlv3.RateLimitDescriptor) []*rlv3.RateLimitDescriptor {
		var ds []*rlv3.RateLimitDescriptor
		for i := range n {
			ds = append(ds, make(i))
		}
		return ds
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	bounds := DefaultOptions().Bounds
	wide := desc()
	for range bounds.MaxEntries + 1 {
		wide.Entries = append(wide.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	tests = append(tests, []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"too many descriptors", request("test", many(bounds.MaxDescriptors+1, func(int) *rlv3.RateLimitDescriptor { return desc("user", "a") })...),
			"descriptors: 65 descriptors, more than the bound of 64 (max descriptors)"},
		{"too many entries", request("test", desc("user", "a"), wide), "descriptors[1].entries: 17 entries, more than the bound of 16 (max entries)"},
		{"empty key", request("test", desc("user", "a", "", "b")), "descriptors[0].entries[1].key: must not be empty"},
		{"long key", request("test", desc(long(bounds.MaxKeyBytes+1), "a")), "descriptors[0].entries[0].key: 1025 bytes, more than the bound of 1024 (max key bytes)"},
		{"long value", request("test", desc("user", long(bounds.MaxValueBytes+1))), "descriptors[0].entries[0].value: 4097 bytes, more than the bound of 4096 (max value bytes)"},
		{"long domain", request(long(bounds.MaxKeyBytes+1), desc("user", "a")), "domain: 1025 bytes"},
		{"invalid UTF-8 value", request("test", desc("user", "a\xffb")), "descriptors[0].entries[0].value: not valid UTF-8"},
		{"invalid UTF-8 key", request("test", desc("us\xc3er", "a")), "descriptors[0].entries[0].key: not valid UTF-8"},
		{"invalid UTF-8 domain", request("te\xe2st", desc("user", "a")), "domain: not valid UTF-8"},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("err = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	if n := h.mem.Len(); n != 0 {
		t.Errorf("invalid requests left %d counters", n)
	}
}

func TestUnlimitedNeverReachesTheStore(t *testing.T) {
	h := newHarness(t, Options{})
	for range 3 {
		resp, err := h.svc.ShouldRateLimit(context.Background(), request("test", desc("free", "x"), desc("open", "y")))
		if err != nil || summaries(resp) != "OK:max OK:-" {
			t.Fatalf("resp %v, err %v", resp, err)
		}
	}
	if n := h.mem.Len(); n != 0 {
		t.Errorf("the store holds %d counters, want 0", n)
	}
}

func headerMap(resp *pb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

// BenchmarkShouldRateLimit measures the request path on the in-memory
// store: three descriptors (a key-only limit, two limits on one descriptor,
// a whitelist), as Envoy sends them.
func BenchmarkShouldRateLimit(b *testing.B) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := New(fixedRules{set}.Current, limit.NewMemory(limit.MemoryOptions{}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := request("test", desc("user", "alice"), desc("tenant", "t"), desc("open", "x"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// countingLimiter counts the calls to a Limiter.
type countingLimiter struct {
	limit.Limiter
	calls int
}

func (c *countingLimiter) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	c.calls++
	return c.Limiter.Evaluate(ctx, hits, ds)
}

// A shadow-mode limit over its limit is charged with the request's other
// limits in one store call (its hit is advisory), not in a second one.
func TestShadowModeTakesOneStoreCall(t *testing.T) {
	h := newHarness(t, Options{})
	cl := &countingLimiter{Limiter: h.mem}
	h.svc.limiter = cl
	for i, want := range []string{"OK OK:0 OK:2", "OK OK:0 OK:1"} {
		resp, err := h.svc.ShouldRateLimit(context.Background(), request("test", desc("shadow", "s"), desc("user", "one")))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp); got != want {
			t.Errorf("call %d: %q, want %q", i, got, want)
		}
	}
	if cl.calls != 2 {
		t.Errorf("%d store calls for 2 requests, want 2", cl.calls)
	}
}

// A descriptor's hits_addend can be up to 2^64-1: it reports usage, which
// is charged though it is beyond the limit (the counter counts up to
// limit.MaxCount), never wraps into a negative or small cost,
// and refunds of any size never raise a counter above its limit.
func TestHugeAddendsAndRefunds(t *testing.T) {
	h := newHarness(t, Options{})
	call := func(d *rlv3.RateLimitDescriptor) string {
		t.Helper()
		resp, err := h.svc.ShouldRateLimit(context.Background(), request("test", d))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp)
	}
	steps := []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{withAddend(desc("user", "h"), math.MaxUint64), "OVER OVER:0"},
		{withAddend(desc("user", "h"), math.MaxInt64+1), "OVER OVER:0"},
		{withAddend(desc("user", "h"), 1<<53+1), "OVER OVER:0"},
		{desc("user", "h"), "OVER OVER:0"},
		{refund(withAddend(desc("user", "h"), math.MaxUint64)), "OK OK:3"},
		{refund(withAddend(desc("user", "h"), 1000)), "OK OK:3"},
		{desc("user", "h"), "OK OK:2"},
		{desc("user", "h"), "OK OK:1"},
		{desc("user", "h"), "OK OK:0"},
		{desc("user", "h"), "OVER OVER:0"},
	}
	for i, s := range steps {
		if got := call(s.d); got != s.want {
			t.Fatalf("step %d: %q, want %q", i, got, s.want)
		}
	}
}

// panicking is a Limiter that panics.
type panicking struct{}

func (panicking) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	panic("limiter bug")
}

func TestPanicIsRecoveredAsInternal(t *testing.T) {
	var logs strings.Builder
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(fixedRules{set}.Current, panicking{}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the pooled scratch survives the panic
		_, err = svc.ShouldRateLimit(context.Background(), request("test", desc("user", "a")))
		if status.Code(err) != codes.Internal {
			t.Fatalf("err = %v, want Internal", err)
		}
	}
	if !strings.Contains(logs.String(), "limiter bug") || !strings.Contains(logs.String(), "panicked") {
		t.Errorf("the panic was not logged: %s", logs.String())
	}
	// A request that needs no limiter still works.
	if resp, err := svc.ShouldRateLimit(context.Background(), request("test", desc("open", "a"))); err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("after the panics: %v, %v", resp, err)
	}
}

// deadlineLimiter records the deadline of the last call's context.
type deadlineLimiter struct {
	limit.Limiter
	deadline time.Time
	has      bool
}

func (d *deadlineLimiter) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	d.deadline, d.has = ctx.Deadline()
	return d.Limiter.Evaluate(ctx, hits, ds)
}

// TestStoreDeadline: the service sets no timer of its own; the store call
// gets the caller's context as it is, with its deadline or without: the
// store bounds its calls itself.
func TestStoreDeadline(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []time.Duration{0, time.Second} {
		l := &deadlineLimiter{Limiter: limit.NewMemory(limit.MemoryOptions{})}
		svc, err := New(fixedRules{set}.Current, l, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if caller > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, caller)
			defer cancel()
		}
		want, wantHas := ctx.Deadline()
		if _, err := svc.ShouldRateLimit(ctx, request("test", desc("user", "a"))); err != nil {
			t.Fatal(err)
		}
		if l.has != wantHas || !l.deadline.Equal(want) {
			t.Errorf("caller's deadline %v (%v): the store call's is %v (%v)", want, wantHas, l.deadline, l.has)
		}
	}
}
