package rlqs

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// wait bounds every wait for an answer of a loopback server: far above
// the few milliseconds one takes, on a machine busy with other tests.
const wait = 10 * time.Second

const tenantRules = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: tenant
    value: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    value: free
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: minute, requests_per_unit: 10}
`

func tenant(v string) map[string]string { return map[string]string{"tenant": v} }

// rls asks the RLS service over the same rules and counters, as an
// Envoy calling ShouldRateLimit would.
func (h *harness) rls(t *testing.T, set *rules.Set, domain string, entries ...string) *rlspb.RateLimitResponse {
	t.Helper()
	svc, err := envoy.New(func() *rules.Set { return set }, h.mem, envoy.Options{Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	d := &corev3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &corev3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*corev3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestAssignmentSharesTheRLSCounter: a report's allowed requests are
// charged to the counter RLS decides with, and the assignment is what is
// left spread over the rest of the window: 540 of 600 left for the 60 s
// of a minute window is 9 a second, one stream having all the demand.
func TestAssignmentSharesTheRLSCounter(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("acme"), allowed: 60})
	got := answers(q.next(wait))
	want := []answer{{bucket: tenant("acme"), what: "tb 9/1s max 3", ttl: DefaultAssignmentTTL}}
	if !sameAnswers(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	resp := h.rls(t, set, "quota", "tenant", "acme")
	if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlspb.RateLimitResponse_OK || st.GetLimitRemaining() != 539 {
		t.Fatalf("RLS after RLQS charged 60 of 600: %v, want OK with 539 remaining", resp)
	}
}

func sameAnswers(got, want []answer) bool {
	key := func(a answer) string { return bucketKey(sortedEntries(a.bucket)) }
	slices.SortFunc(got, func(a, b answer) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b answer) int { return strings.Compare(key(a), key(b)) })
	return slices.EqualFunc(got, want, func(a, b answer) bool {
		return key(a) == key(b) && a.what == b.what && a.ttl == b.ttl
	})
}

func sortedEntries(m map[string]string) []rules.Entry {
	var es []rules.Entry
	for k, v := range m {
		es = append(es, rules.Entry{Key: k, Value: v})
	}
	slices.SortFunc(es, func(a, b rules.Entry) int { return strings.Compare(a.Key, b.Key) })
	return es
}

// TestBucketMapping: unmatched buckets, rules without limits, shadow mode
// and unknown domains are allow-all; a bucket whose keys a rule nests in
// another order than the keys' is matched, on the counter RLS uses for
// that order.
func TestBucketMapping(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	q := h.open(t, "envoy-1")
	ab := map[string]string{"a": "x", "b": "y"}
	q.report("quota",
		use{bucket: map[string]string{"user": "u"}, allowed: 1},
		use{bucket: tenant("free"), allowed: 1},
		use{bucket: tenant("shadowed"), allowed: 5},
		use{bucket: ab, allowed: 10})
	want := []answer{
		{bucket: map[string]string{"user": "u"}, what: "allow", ttl: DefaultAssignmentTTL},
		{bucket: tenant("free"), what: "allow", ttl: DefaultAssignmentTTL},
		{bucket: tenant("shadowed"), what: "allow", ttl: DefaultAssignmentTTL},
		{bucket: ab, what: "deny", ttl: DefaultAssignmentTTL},
	}
	if got := answers(q.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// 10 of 10 spent through RLQS: RLS denies the same descriptor, in the
	// rule's order.
	if resp := h.rls(t, set, "quota", "b", "y", "a", "x"); resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("RLS for (b=y, a=x) after RLQS spent its limit: %v", resp)
	}
	other := h.open(t, "envoy-1")
	other.report("elsewhere", use{bucket: tenant("acme"), allowed: 1})
	want = []answer{{bucket: tenant("acme"), what: "allow", ttl: DefaultAssignmentTTL}}
	if got := answers(other.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("unknown domain: got %+v, want %+v", got, want)
	}
}

// TestFleetShare: two instances sharing the store (two Services on one
// Memory) split a limit by their streams' demand.
func TestFleetShare(t *testing.T) {
	set := parseRules(t, tenantRules)
	h1 := serve(t, set, nil, Options{})
	h2 := serve(t, set, h1.mem, Options{Now: h1.clock.Now})
	q1, q2 := h1.open(t, "envoy-1"), h2.open(t, "envoy-2")
	q1.report("quota", use{bucket: tenant("acme"), denied: 30})
	q1.next(wait)
	q2.report("quota", use{bucket: tenant("acme"), denied: 10})
	// 600 left over 60 s, 10 a second for the fleet: envoy-2 asks for 10
	// of the 40 the fleet asked for, (10+1)/(40+1) of 10 a second, less
	// what the others admitted unseen: 2.6.
	if got, want := answers(q2.next(wait)), []answer{{bucket: tenant("acme"), what: "tb 3/1s max 1", ttl: DefaultAssignmentTTL}}; !sameAnswers(got, want) {
		t.Fatalf("envoy-2: got %+v, want %+v", got, want)
	}
	h1.clock.Add(5 * time.Second)
	q1.report("quota", use{bucket: tenant("acme"), allowed: 50, denied: 0})
	// A report interval later, in the next demand slot: 550 left over
	// 55 s; in the slot that ended, envoy-1 asked for 30 of the fleet's
	// 40: 10 × 31/41, less what envoy-2 admitted unseen, 7.5.
	if got, want := answers(q1.next(wait)), []answer{{bucket: tenant("acme"), what: "tb 7/1s max 2", ttl: DefaultAssignmentTTL}}; !sameAnswers(got, want) {
		t.Fatalf("envoy-1: got %+v, want %+v", got, want)
	}
}

// TestSpentWindow: a window spent through RLQS is deny-all, pushed again
// as soon as the window ends, and an Envoy that admitted more than was
// left leaves the counter spent, not refused.
func TestSpentWindow(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	h.clock.Add(59 * time.Second)
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("acme"), allowed: 700})
	if got := answers(q.next(wait)); len(got) != 1 || got[0].what != "deny" {
		t.Fatalf("after 700 of 600: %+v, want deny", got)
	}
	spec := set.Match("quota", []rules.Entry{{Key: "tenant", Value: "acme"}}).Limits[0].Spec
	if r := h.remaining(t, h.svc.testCounterKey(t, "quota", tenant("acme")), spec); r != 0 {
		t.Fatalf("remaining %d after Envoy admitted more than the limit, want 0", r)
	}
	// The window ends 1 s later: the timer, not a report, brings a fresh
	// assignment for the new window.
	h.clock.Add(2 * time.Second)
	if got := answers(q.next(wait)); len(got) != 1 || got[0].what != "tb 10/1s max 3" {
		t.Fatalf("after the window ended: %+v, want the new window's 10 a second", got)
	}
}

// testCounterKey returns the counter key of a bucket's first limit as a
// stream resolves it.
func (s *Service) testCounterKey(t *testing.T, domain string, id map[string]string) string {
	t.Helper()
	st := s.newStream(nil, "test")
	st.domain = domain
	b := &bucket{entries: sortedEntries(id)}
	st.resolve(b, s.rules())
	if len(b.counters) == 0 {
		t.Fatalf("bucket %v has no counter", id)
	}
	return b.counters[0].key.Value()
}

// TestIdleBucketAbandoned: a bucket without demand for IdleTimeout is
// abandoned, and comes back as new when Envoy reports it again.
func TestIdleBucketAbandoned(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{ReportInterval: time.Second, AssignmentTTL: 3 * time.Second, IdleTimeout: 2 * time.Second})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("acme"), allowed: 1}, use{bucket: tenant("beta"), allowed: 1})
	q.next(wait)
	h.clock.Add(time.Second)
	q.report("quota", use{bucket: tenant("acme")}, use{bucket: tenant("beta"), allowed: 1})
	q.next(wait)
	h.clock.Add(time.Second)
	q.report("quota", use{bucket: tenant("acme")}, use{bucket: tenant("beta"), allowed: 1})
	got := answers(q.next(wait))
	if !slices.ContainsFunc(got, func(a answer) bool { return a.what == "abandon" && a.bucket["tenant"] == "acme" }) ||
		slices.ContainsFunc(got, func(a answer) bool { return a.what == "abandon" && a.bucket["tenant"] == "beta" }) {
		t.Fatalf("after 2 s without demand for acme: %+v, want acme abandoned and beta kept", got)
	}
	if n := h.metric(t, "buckets"); n != 1 {
		t.Fatalf("floodgate_rlqs_buckets %v, want 1", n)
	}
}

// TestBadInput: every refusal names what is wrong, counts it, and either
// ends the stream with a clear status (stream-level faults) or leaves
// the other buckets served (bucket-level ones).
func TestBadInput(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{MaxStreams: 2, MaxStreamBuckets: 2, MaxBucketIDBytes: 16})
	q := h.open(t, "envoy-1")
	q.report("quota",
		use{bucket: map[string]string{}, allowed: 1},
		use{bucket: tenant("a-value-far-too-long"), allowed: 1},
		use{bucket: map[string]string{"": "x"}, allowed: 1},
		use{bucket: tenant("a"), allowed: 1},
		use{bucket: tenant("b"), allowed: 1},
		use{bucket: tenant("c"), allowed: 1})
	if got := answers(q.next(wait)); len(got) != 2 {
		t.Fatalf("got %+v, want the two buckets within the bounds", got)
	}
	if n := h.metric(t, "refused", refusedBucketID); n != 3 {
		t.Errorf("refused bucket_id %v, want 3", n)
	}
	if n := h.metric(t, "refused", refusedBuckets); n != 1 {
		t.Errorf("refused too_many_buckets %v, want 1", n)
	}

	noDomain := h.open(t, "envoy-2")
	noDomain.report("", use{bucket: tenant("a"), allowed: 1})
	if err := noDomain.end(wait); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no domain") {
		t.Errorf("a first report without a domain ended the stream with %v, want InvalidArgument", err)
	}
	changed := h.open(t, "envoy-2")
	changed.report("quota", use{bucket: tenant("a"), allowed: 1})
	changed.next(wait)
	changed.report("other", use{bucket: tenant("a"), allowed: 1})
	if err := changed.end(wait); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `domain "other"`) {
		t.Errorf("a changed domain ended the stream with %v, want InvalidArgument", err)
	}
	// q still holds a stream: with the bound of 2, a second one is the
	// last admitted and a third is refused.
	second := h.open(t, "envoy-3")
	second.report("quota", use{bucket: tenant("a")})
	second.next(wait)
	third := h.open(t, "envoy-4")
	if err := third.end(wait); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a stream over the bound ended with %v, want ResourceExhausted", err)
	}
	if n := h.metric(t, "streams"); n != 2 {
		t.Errorf("floodgate_rlqs_streams %v, want 2", n)
	}
}

// TestStoreFailure: when the store fails, each bucket gets its rule's
// failure mode: allow-all, deny-all, or, for unavailable, nothing (its
// assignment runs out in Envoy). A Memory with room for one counter fails
// every round that needs a new one.
func TestStoreFailure(t *testing.T) {
	set := parseRules(t, `
domain: quota
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: closed
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: gone
    failure_mode: unavailable
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	c := &clock{t: epoch}
	h := serve(t, set, limit.NewMemory(limit.MemoryOptions{MaxEntries: 1, Now: c.Now}), Options{Now: c.Now})
	q := h.open(t, "envoy-1")
	q.report("quota",
		use{bucket: map[string]string{"open": "x"}, allowed: 1},
		use{bucket: map[string]string{"closed": "x"}, allowed: 1},
		use{bucket: map[string]string{"gone": "x"}, allowed: 1})
	want := []answer{
		{bucket: map[string]string{"open": "x"}, what: "allow", ttl: DefaultAssignmentTTL},
		{bucket: map[string]string{"closed": "x"}, what: "deny", ttl: DefaultAssignmentTTL},
	}
	if got := answers(q.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if n := h.metric(t, "store_errors"); n < 1 {
		t.Fatalf("floodgate_rlqs_store_errors_total %v, want at least 1", n)
	}
}

// TestStoreFailureKeepsAssignment: a bucket with an assignment in force
// keeps it through a failed store call, rather than getting its failure
// mode's for a whole report interval, until the window it was paced for
// ends; a new bucket in the same call gets its failure mode's. A Memory with room for two counters (the first
// bucket's and its demand's) fails the call that needs more.
func TestStoreFailureKeepsAssignment(t *testing.T) {
	set := parseRules(t, `
domain: quota
descriptors:
  - key: open
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 100}
  - key: closed
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	// 6 s into a 10 s window.
	c := &clock{t: epoch.Add(6 * time.Second)}
	h := serve(t, set, limit.NewMemory(limit.MemoryOptions{MaxEntries: 2, Now: c.Now}), Options{Now: c.Now})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: map[string]string{"open": "x"}, allowed: 20})
	if got := answers(q.next(wait)); len(got) != 1 || !strings.HasPrefix(got[0].what, "tb ") {
		t.Fatalf("first round: %+v, want a token bucket", got)
	}
	c.Add(2 * time.Second)
	q.report("quota",
		use{bucket: map[string]string{"open": "x"}, allowed: 100},
		use{bucket: map[string]string{"closed": "x"}, allowed: 1})
	want := []answer{{bucket: map[string]string{"closed": "x"}, what: "deny", ttl: DefaultAssignmentTTL}}
	if got := answers(q.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("a failed round: got %+v, want %+v (the open bucket keeps its token bucket)", got, want)
	}
	// Once the window the token bucket was paced for has ended, a failed
	// round gives the failure mode's assignment: the pace of a window's
	// last seconds must not outlive it.
	c.Add(4 * time.Second)
	q.report("quota",
		use{bucket: map[string]string{"open": "x"}, allowed: 1},
		use{bucket: map[string]string{"closed": "x"}, allowed: 1})
	// (The closed bucket's deny-all, sent 4 s ago, is not sent again.)
	want = []answer{{bucket: map[string]string{"open": "x"}, what: "allow", ttl: DefaultAssignmentTTL}}
	if got := answers(q.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("a failed round after the window ended: got %+v, want %+v", got, want)
	}
	if n := h.metric(t, "store_errors"); n < 1 {
		t.Fatalf("floodgate_rlqs_store_errors_total %v, want at least 1", n)
	}
}

// TestSilentStreamClosed: a stream that never reports is closed after
// IdleTimeout, freeing its place among MaxStreams.
func TestSilentStreamClosed(t *testing.T) {
	set := parseRules(t, tenantRules)
	idle := 2 * time.Second
	h := serve(t, set, limit.NewMemory(limit.MemoryOptions{}),
		Options{ReportInterval: time.Second, AssignmentTTL: 3 * time.Second, IdleTimeout: idle, Now: time.Now})
	q := h.open(t, "envoy-1")
	start := time.Now()
	err := q.end(idle + wait)
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) < idle-100*time.Millisecond {
		t.Fatalf("a silent stream ended with %v after %v, want DeadlineExceeded after %v", err, time.Since(start), idle)
	}
	if n := h.metric(t, "refused", refusedSilent); n != 1 {
		t.Fatalf("refused silent %v, want 1", n)
	}
}

// TestShutdownEndsStreams: Shutdown ends open streams with Unavailable, so
// that each Envoy reopens its stream elsewhere, and refuses new ones.
func TestShutdownEndsStreams(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("acme"), allowed: 1})
	q.next(wait)
	h.svc.Shutdown()
	if err := q.end(wait); status.Code(err) != codes.Unavailable {
		t.Fatalf("an open stream ended with %v on shutdown, want Unavailable", err)
	}
	if err := h.open(t, "envoy-2").end(wait); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new stream after shutdown ended with %v, want Unavailable", err)
	}
	if n := h.metric(t, "streams"); n != 0 {
		t.Fatalf("floodgate_rlqs_streams %v after shutdown, want 0", n)
	}
}

// TestMetrics: reports, the requests they count and the actions sent.
func TestMetrics(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("acme"), allowed: 7, denied: 3}, use{bucket: tenant("free"), allowed: 2})
	q.next(wait)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reports", nil, 1}, {"requests", []string{"allowed"}, 9}, {"requests", []string{"denied"}, 3},
		{"assignments", []string{"token_bucket"}, 1}, {"assignments", []string{"allow_all"}, 1},
		{"buckets", nil, 2}, {"streams", nil, 1},
	} {
		if got := h.metric(t, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestRefresh: an unchanged assignment is sent again before its time to
// live runs out, and not at every report.
func TestRefresh(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	q := h.open(t, "envoy-1")
	q.report("quota", use{bucket: tenant("free"), allowed: 1}, use{bucket: tenant("x"), allowed: 1})
	q.next(wait)
	// Both assignments were sent now; at +4 s nothing changed, but the
	// unlimited tenant is due a refresh at +5 s (15 s - 2 report
	// intervals): the report at +4 s brings only x's new pace.
	h.clock.Add(4 * time.Second)
	q.report("quota", use{bucket: tenant("free"), allowed: 1}, use{bucket: tenant("x"), allowed: 100})
	if got := answers(q.next(wait)); len(got) != 1 || got[0].bucket["tenant"] != "x" {
		t.Fatalf("at +4 s: %+v, want only x's changed assignment", got)
	}
	h.clock.Add(2 * time.Second)
	q.report("quota", use{bucket: tenant("free"), allowed: 1})
	if got := answers(q.next(wait)); !slices.ContainsFunc(got, func(a answer) bool { return a.bucket["tenant"] == "free" && a.what == "allow" }) {
		t.Fatalf("at +6 s: %+v, want free's refresh", got)
	}
}

// TestThousandsOfBuckets: streams opening thousands of buckets hold at
// most MaxBuckets of them, whatever they send; each bucket held costs a
// bounded amount of memory (measured and logged), every bucket held gets
// its assignment in responses of at most maxActions, and the rest are
// refused and counted. The heap measured holds the in-memory store's
// counters too (two per bucket).
func TestThousandsOfBuckets(t *testing.T) {
	const (
		perStream = 3000
		streams   = 3
		bound     = 5000
	)
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{MaxBuckets: bound})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	held := 0
	for s := range streams {
		q := h.open(t, "envoy-"+itoa(int64(s)))
		uses := make([]use, perStream)
		for i := range uses {
			// 16-byte values, as a hash or an API key would be.
			uses[i] = use{bucket: tenant(fmt.Sprintf("s%d-%013d", s, i)), allowed: 1}
		}
		q.report("quota", uses...)
		want := min(perStream, bound-held)
		for got := 0; got < want; {
			r := q.next(wait)
			if n := len(r.GetBucketAction()); n == 0 || n > maxActions {
				t.Fatalf("a response of %d actions, want 1 to %d", n, maxActions)
			} else {
				got += n
			}
		}
		held += want
	}
	// The last stream's buckets are all refused: no response to wait for.
	refused := float64(streams*perStream - bound)
	h.waitMetric(t, refused, "refused", refusedBuckets)
	grown := int64(heap()) - int64(before)
	perBucket := grown / int64(held)
	t.Logf("%d buckets held over %d streams (bound %d): heap grew %d KiB, %d bytes per bucket", held, streams, bound, grown>>10, perBucket)
	if n := h.metric(t, "buckets"); n != bound {
		t.Errorf("floodgate_rlqs_buckets %v, want the bound %d", n, bound)
	}
	if n := h.metric(t, "refused", refusedBuckets); n != refused {
		t.Errorf("refused too_many_buckets %v, want %v", n, refused)
	}
	// Far above the few hundred bytes a bucket takes, far below what an
	// unbounded map of reports would.
	if perBucket > 4<<10 {
		t.Errorf("%d bytes of heap per bucket held, want at most 4 KiB", perBucket)
	}
}
