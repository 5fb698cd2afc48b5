package dropin

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/xdstest"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestEnvoyGatewayAnswers plays every case of Envoy Gateway's translator
// test data (xdstest.GatewayCases) on both servers, its rules as rule
// files and then pushed over xDS: the descriptors its routes' actions
// send, each past its limit.
func TestEnvoyGatewayAnswers(t *testing.T) {
	reference := harness.Require(t, harness.Reference)
	built, err := builtAt(reference)
	if err != nil {
		t.Logf("%v: compared as the newest", err)
	}
	descriptors, requests := 0, 0
	for _, c := range xdstest.GatewayCases(t) {
		files := map[string]string{}
		var resources []types.Resource
		for i, doc := range c.Docs {
			files[fmt.Sprintf("%s-%d.yaml", c.Name, i)] = doc
			resources = append(resources, c.Resource(t, i))
		}
		steps, window, n := gatewaySteps(t, c)
		descriptors, requests = descriptors+n, requests+len(steps)
		// In parallel (two at a time on two cores): most of a case's
		// time is its four processes starting. On a machine that busy a
		// Redis call can outlast floodgate's deadline (50 ms), which
		// answers by the failure policy: not what this test looks at.
		env := []string{"FLOODGATE_REDIS_DEADLINE=5s"}
		t.Run(c.Name+"/files", func(t *testing.T) {
			t.Parallel()
			playBoth(t, reference, built, scenario{name: c.Name, files: files, env: env, steps: steps, window: window})
		})
		t.Run(c.Name+"/xds", func(t *testing.T) {
			t.Parallel()
			playBoth(t, reference, built, scenario{name: c.Name, xds: resources, env: env, steps: steps, window: window})
		})
	}
	t.Logf("%d descriptors, %d requests, each taken by rule files and over xDS", descriptors, requests)
}

// gatewaySteps are the calls of a case: for each descriptor its routes
// send, more requests than its limit allows; the shortest window of those
// limits, and how many descriptors. Which limit a descriptor meets is
// floodgate's word; that both servers answer alike is what the test
// checks.
func gatewaySteps(t *testing.T, c xdstest.GatewayCase) (steps []step, window time.Duration, descriptors int) {
	t.Helper()
	docs := map[string][]byte{}
	for i, doc := range c.Docs {
		docs[fmt.Sprint(i)] = []byte(doc)
	}
	set, err := rules.Parse(docs, rules.Options{})
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	window = time.Minute
	for _, route := range c.Routes {
		for _, domain := range slices.Sorted(maps.Keys(route.RateLimits)) {
			for _, entry := range route.RateLimits[domain] {
				for _, kv := range gatewayDescriptors(t, entry.Actions) {
					var es []rules.Entry
					for i := 0; i < len(kv); i += 2 {
						es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
					}
					r := set.Match(domain, es)
					if r == nil || len(r.Limits) != 1 {
						t.Fatalf("%s, route %s: %s %v meets no limit of the case's rules", c.Name, route.Name, domain, kv)
					}
					l := r.Limits[0]
					window = min(window, l.Unit.Duration())
					name := fmt.Sprintf("route %s: %v", route.Name, es)
					steps = append(steps, pastLimit(name, req(domain, d(kv...)), l.RequestsPerUnit)...)
					descriptors++
				}
			}
		}
	}
	return steps, window, descriptors
}

// pastLimit is the calls that take a counter of limit past it: one call
// at a time up to 10, or one of limit-1 hits (the request's hits_addend)
// and three more, each of one.
func pastLimit(name string, r *pb.RateLimitRequest, limit uint32) []step {
	if limit <= 10 {
		return rep(int(limit)+2, name, r)
	}
	return cat(one(name+", all but one", withHits(proto.CloneOf(r), limit-1)), rep(3, name, r))
}

// gatewayDescriptors returns the descriptors, as key, value, key, value…,
// that the actions of one rate_limits entry send for requests that meet
// them (the headers a header_value_match expects, a client address in a
// remote_address_match's range): one, or one for each of two values where
// an action takes its value from the request.
func gatewayDescriptors(t *testing.T, actions []xdstest.GatewayAction) [][]string {
	t.Helper()
	out := [][]string{nil}
	for _, a := range actions {
		key, _ := a.Fields["descriptor_key"].(string)
		value, _ := a.Fields["descriptor_value"].(string)
		var values []string
		switch a.Kind {
		case "GenericKey":
			key, values = cmp.Or(key, "generic_key"), []string{value}
		case "HeaderValueMatch":
			key, values = cmp.Or(key, "header_match"), []string{value}
		case "QueryParameterValueMatch":
			key, values = cmp.Or(key, "query_match"), []string{value}
		case "RequestHeaders":
			values = []string{"alice", "bob"}
		case "RemoteAddressMatch":
			values = []string{value}
			if strings.Contains(value, "%") { // a formatter: the client's address
				values = clientAddrs(t, a.Fields)
			}
		default:
			t.Fatalf("action %s: no descriptor derived for it here (add it)", a.Kind)
		}
		if key == "" {
			t.Fatalf("action %s without a descriptor_key", a.Kind)
		}
		var next [][]string
		for _, kv := range out {
			for _, v := range values {
				next = append(next, append(slices.Clip(kv), key, v))
			}
		}
		out = next
	}
	return out
}

// clientAddrs are two client addresses that a remote_address_match's
// address_matcher matches: in its first range, or out of it when inverted.
func clientAddrs(t *testing.T, fields map[string]any) []string {
	t.Helper()
	m, _ := fields["address_matcher"].(map[string]any)
	ranges, _ := m["ranges"].([]any)
	if len(ranges) == 0 {
		t.Fatalf("remote_address_match without ranges: %v", fields)
	}
	r, _ := ranges[0].(map[string]any)
	prefixLen, _ := r["prefix_len"].(map[string]any)
	bits, _ := prefixLen["value"].(int)
	addr, err := netip.ParseAddr(fmt.Sprint(r["address_prefix"]))
	if err != nil {
		t.Fatal(err)
	}
	prefix := netip.PrefixFrom(addr, bits).Masked()
	first := prefix.Addr().Next()
	if invert, _ := m["invert_match"].(bool); invert {
		first = netip.MustParseAddr("203.0.113.1")
	}
	second := first.Next()
	for _, a := range []netip.Addr{first, second} {
		if in, invert := prefix.Contains(a), m["invert_match"] == true; in == invert {
			t.Fatalf("%s is not an address %v matches", a, m)
		}
	}
	return []string{first.String(), second.String()}
}
