package envoy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// TestDecisionsReachTheirLimits: each decision is reported on the
// descriptor and limit its hit came from, whatever the limits around it
// that have no hit (unlimited, replaced, no rule) and however many limits
// a descriptor has. Each status reads CODE:remaining:name, with "-" for
// no current_limit and "max" for an unlimited descriptor.
func TestDecisionsReachTheirLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"limits without hits first", request("test", desc("free", "x"), desc("standard", "x"), desc("tenant", "t"), desc("premium", "x"), desc("user", "a")),
			"OK:max OK:- OK:1:daily OK:9:premium OK:2:"},
		{"limits without hits last", request("test", desc("user", "a"), desc("premium", "x"), desc("tenant", "t"), desc("standard", "x"), desc("free", "x")),
			"OK:2: OK:9:premium OK:1:daily OK:- OK:max"},
		{"no rule between two limits", request("test", desc("tenant", "t"), desc("nomatch", "y"), desc("open", "x"), desc("ip", "1")),
			"OK:1:daily OK:- OK:- OK:0:"},
		// Blocked: the admitted limits report what they hold, unconsumed.
		{"one limit over among others", request("test", desc("zero", "z"), desc("tenant", "t"), desc("free", "x"), desc("user", "a")),
			"OVER:0: OK:2:daily OK:max OK:3:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			resp, err := h.svc.ShouldRateLimit(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range resp.Statuses {
				s := summary(st)
				if l := st.GetCurrentLimit(); l != nil {
					s += ":" + l.GetName()
				}
				got = append(got, s)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("statuses %q, want %q", g, tc.want)
			}
		})
	}
}

// TestHitGroupIsTheQuota: a hit's Group names its quota (one per quota
// descriptor, by its index) and nothing else; the other hits have none.
func TestHitGroupIsTheQuota(t *testing.T) {
	h := newHarness(t, Options{})
	rec := &hitRecorder{Limiter: h.mem}
	h.svc.limiter = rec
	req := request("test", desc("user", "a"), desc("quota_a", "x"), desc("tenant", "t"), desc("quota_b", "y"), desc("shadow", "s"))
	if _, err := h.svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, hit := range rec.hits {
		got = append(got, fmt.Sprintf("%v/%d", hit.Mode, hit.Group))
	}
	if g, want := strings.Join(got, " "), "enforce/0 quota/1 enforce/0 enforce/0 quota/3 advisory/0"; g != want {
		t.Errorf("hits (mode/group) %s, want %s", g, want)
	}
}

// hitRecorder is a Limiter that records the hits of its last call.
type hitRecorder struct {
	limit.Limiter
	hits []limit.Hit
}

func (r *hitRecorder) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	r.hits = append(r.hits[:0], hits...)
	return r.Limiter.Evaluate(ctx, hits, ds)
}
