package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func TestResponseHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers Headers
		body    bool
		reqs    []*pb.RateLimitRequest
		want    map[string]string // headers of the last answer
	}{
		{name: "off by default", reqs: []*pb.RateLimitRequest{request("test", desc("user", "a"))}, want: map[string]string{}},
		{name: "reference names", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("user", "a"))},
			want: map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "50"}},
		{name: "custom names", headers: Headers{Style: HeadersReference, LimitName: "X-Limit", RemainingName: "X-Left", ResetName: "X-Reset"},
			reqs: []*pb.RateLimitRequest{request("test", desc("user", "a"))},
			want: map[string]string{"X-Limit": "3", "X-Left": "2", "X-Reset": "50"}},
		{name: "the most restrictive descriptor", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("user", "a"), desc("ip", "1"), desc("open", "x"))},
			want: map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1"}},
		// As the reference server: the last descriptor over a rate limit,
		// whatever the order of their remaining or reset; a quota over
		// its limit does not take the headers from a rate limit.
		{name: "the last descriptor over a rate limit", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("ip", "1")), request("test", desc("zero", "x"), desc("ip", "1"))},
			want: map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "Retry-After": "50"}},
		{name: "the last descriptor over a rate limit, reversed", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("ip", "1")), request("test", desc("ip", "1"), desc("zero", "x"))},
			want: map[string]string{"RateLimit-Limit": "0", "RateLimit-Remaining": "0", "RateLimit-Reset": "50", "Retry-After": "50"}},
		{name: "a quota over before a rate limit over", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("quota_a", "q"), desc("ip", "1")), request("test", desc("quota_a", "q"), desc("ip", "1"))},
			want: map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "Retry-After": "50"}},
		{name: "Retry-After when over", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", withAddend(desc("user", "a"), 3)), request("test", desc("user", "a"), desc("ip", "1"))},
			want: map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "50", "Retry-After": "50"}},
		{name: "IETF fields", headers: Headers{Style: HeadersIETF},
			reqs: []*pb.RateLimitRequest{request("test", desc("tenant", "t"))},
			want: map[string]string{"RateLimit-Policy": `"daily";q=2;w=86400`, "RateLimit": `"daily";r=1;t=86390`}},
		{name: "IETF fields when over, unnamed limit", headers: Headers{Style: HeadersIETF},
			reqs: []*pb.RateLimitRequest{request("test", withAddend(desc("user", "a"), 3)), request("test", desc("user", "a"))},
			want: map[string]string{"RateLimit-Policy": `"default";q=3;w=60`, "RateLimit": `"default";r=0;t=50`, "Retry-After": "50"}},
		{name: "a limit that can never pass resets with its window", headers: Headers{Style: HeadersReference},
			reqs: []*pb.RateLimitRequest{request("test", desc("zero", "x"))},
			want: map[string]string{"RateLimit-Limit": "0", "RateLimit-Remaining": "0", "RateLimit-Reset": "50", "Retry-After": "50"}},
		{name: "JSON body with a 429", body: true,
			reqs: []*pb.RateLimitRequest{request("test", withAddend(desc("user", "a"), 3)), request("test", desc("user", "a"))},
			want: map[string]string{"content-type": "application/json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{Headers: tc.headers, OverLimitBody: tc.body})
			var resp *pb.RateLimitResponse
			for _, r := range tc.reqs {
				var err error
				if resp, err = h.svc.ShouldRateLimit(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if got := headerMap(resp); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("headers = %v, want %v", got, tc.want)
			}
			if tc.body {
				if got, want := string(resp.RawBody), `{"code":"OVER_LIMIT","domain":"test","retry_after_seconds":50}`; got != want {
					t.Errorf("raw_body = %s, want %s", got, want)
				}
			} else if resp.RawBody != nil {
				t.Errorf("raw_body = %s without OverLimitBody", resp.RawBody)
			}
		})
	}
}

// TestDurationUntilResetWholeSeconds: Envoy keeps only the seconds of
// duration_until_reset for X-RateLimit-Reset, so every reset is rounded up
// and a client is never told 0 while a retry would be refused.
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       *rlv3.RateLimitDescriptor
		advance time.Duration // before the last of two requests
		want    string        // the last answer's summary
		reset   time.Duration
	}{
		// 49.7 s left in the minute.
		{"fixed window, fraction left", desc("user", "a"), 300 * time.Millisecond, "OK OK:1", 50 * time.Second},
		// The bucket of 1 refills in 250 ms: 150 ms left is 1 s, not 0.
		{"token bucket denial, 150 ms to go", desc("bucket", "a"), 100 * time.Millisecond, "OVER OVER:0", time.Second},
		// 30 s windows: t0 is 10 s into one, 20 s left.
		{"unit_multiplier window", desc("multi", "a"), 0, "OK OK:0", 20 * time.Second},
		// requests_per_unit 0: the time left in its window, as the reference.
		{"zero limit, fraction left", desc("zero", "a"), 1500 * time.Millisecond, "OVER OVER:0", 49 * time.Second},
		// A look (hits_addend 0) at it: the same time left.
		{"zero limit, looked at", withAddend(desc("zero", "a"), 0), 1500 * time.Millisecond, "OK OK:0", 49 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			var resp *pb.RateLimitResponse
			for i := range 2 {
				if i == 1 {
					h.now = h.now.Add(tc.advance)
				}
				var err error
				if resp, err = h.svc.ShouldRateLimit(context.Background(), request("test", tc.d)); err != nil {
					t.Fatal(err)
				}
			}
			if got := strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			st := resp.Statuses[0]
			if got := st.DurationUntilReset.AsDuration(); got != tc.reset {
				t.Errorf("duration_until_reset = %v, want %v", got, tc.reset)
			}
			if tc.d.Entries[0].Key == "multi" {
				if m := st.CurrentLimit.GetUnitMultiplier(); m.GetValue() != 30 {
					t.Errorf("unit_multiplier = %v, want 30", m)
				}
			} else if m := st.CurrentLimit.GetUnitMultiplier(); m != nil {
				t.Errorf("unit_multiplier = %v for a rule without one, want none (as the reference server)", m)
			}
		})
	}
}

// TestDynamicMetadata: with DynamicMetadata the answer carries the request
// and the merged metadata of the rules that passed, as the reference server
// does with RESPONSE_DYNAMIC_METADATA; without it, none.
func TestDynamicMetadata(t *testing.T) {
	mixed := request("test", desc("meta_a", "1"), withAddend(desc("meta_b", "2"), 0), desc("meta_over", "3"), desc("meta_nolimit", "4"))
	mixed.HitsAddend = 1
	for _, tc := range []struct {
		name string
		on   bool
		req  *pb.RateLimitRequest
		want string
	}{
		{"off", false, mixed, `null`},
		{"passed rules merged, the first value of a name wins", true, mixed,
			`{"descriptors":[{"entries":["meta_a=1"]},{"entries":["meta_b=2"],"hitsAddend":0},{"entries":["meta_over=3"]},{"entries":["meta_nolimit=4"]}],` +
				`"domain":"test","hitsAddend":1,"metadata":{"extra":null,"nested":{"x":1,"y":[2,true]},"team":"a"}}`},
		// The replaced limit is not counted: its rule's metadata is left
		// out, not merged ahead of the replacer's.
		{"a replaced rule's left out", true, request("test", desc("meta_replaced", "1"), desc("meta_replacer", "2")),
			`{"descriptors":[{"entries":["meta_replaced=1"]},{"entries":["meta_replacer=2"]}],"domain":"test","metadata":{"other":{"a":1},"team":"replacer"}}`},
		{"a domain without rules: the request", true, request("nowhere", desc("user", "a")),
			`{"descriptors":[{"entries":["user=a"]}],"domain":"nowhere"}`},
		// One space between the override's fields, whatever the build
		// (protobuf-go varies its text's spacing from one to another).
		{"an override, in protobuf text", true, request("nowhere", withOverride(desc("user", "a"), 5, typev3.RateLimitUnit_MINUTE, 30)),
			`{"descriptors":[{"entries":["user=a"],"limit":"requests_per_unit:5 unit:MINUTE unit_multiplier:{value:30}"}],"domain":"nowhere"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{DynamicMetadata: tc.on})
			resp, err := h.svc.ShouldRateLimit(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got := "null"
			if md := resp.GetDynamicMetadata(); md != nil {
				b, _ := json.Marshal(md.AsMap())
				got = string(b)
			}
			if got != tc.want {
				t.Errorf("dynamic_metadata\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
