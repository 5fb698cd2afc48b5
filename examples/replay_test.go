package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/internal/redistest"
)

// decider is one way to ask floodgate: gRPC, as Envoy does, or the HTTP
// /json endpoint.
type decider interface {
	decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

type grpcDecider struct{ c *rlsClient }

func (g grpcDecider) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return g.c.rls.ShouldRateLimit(ctx, req)
}

type jsonDecider struct{ p *floodgateProc }

// decide posts the request to /json and checks that the HTTP status agrees
// with the answer: 429 for OVER_LIMIT, 200 otherwise.
func (j jsonDecider) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	code, out, err := j.p.postJSON(ctx, body)
	if err != nil {
		return nil, err
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("/json answered %d %q: %w", code, out, err)
	}
	want := http.StatusOK
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		want = http.StatusTooManyRequests
	}
	if code != want {
		return nil, fmt.Errorf("/json answered HTTP %d with overall code %v", code, resp.GetOverallCode())
	}
	return &resp, nil
}

// replay sends what Envoy would send for a request.
type replay struct {
	t      *testing.T
	model  *httpModel
	d      decider
	domain string
}

// send asks floodgate about r's descriptors and returns the answer; it
// fails the test when the route produces none.
func (rp *replay) send(r request) *rlsv3.RateLimitResponse {
	rp.t.Helper()
	_, descs, err := rp.model.descriptors(r)
	if err != nil {
		rp.t.Fatal(err)
	}
	if len(descs) == 0 {
		rp.t.Fatalf("%s %s sends no descriptor", r.method, r.path)
	}
	list := make([]*rlcommonv3.RateLimitDescriptor, len(descs))
	for i, p := range descs {
		list[i] = p.desc
	}
	return rp.sendDescriptors(list)
}

func (rp *replay) sendDescriptors(list []*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	rp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rp.d.decide(ctx, &rlsv3.RateLimitRequest{Domain: rp.domain, Descriptors: list})
	if err != nil {
		rp.t.Fatal(err)
	}
	if len(resp.GetStatuses()) != len(list) {
		rp.t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(list))
	}
	return resp
}

// over reports whether Envoy rejects the request.
func over(resp *rlsv3.RateLimitResponse) bool {
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
}

// codes lists the statuses' codes, e.g. "OK OVER_LIMIT".
func codes(resp *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range resp.GetStatuses() {
		s = append(s, st.GetCode().String())
	}
	return strings.Join(s, " ")
}

// burst sends n requests as fast as it can and checks a bucket of
// capacity that refills at rate per second: the first capacity pass, and
// no more pass than the capacity plus what refilled meanwhile.
func (rp *replay) burst(n int, capacity int, rate float64, next func(i int) request) {
	rp.t.Helper()
	passed := 0
	start := time.Now()
	for i := range n {
		resp := rp.send(next(i))
		if !over(resp) {
			passed++
		} else if i < capacity {
			rp.t.Fatalf("request %d of the burst was refused (%s); the first %d pass", i+1, codes(resp), capacity)
		}
	}
	elapsed := time.Since(start)
	if most := capacity + int(rate*elapsed.Seconds()) + 1; passed > most {
		rp.t.Errorf("%d of %d passed in %v; at most %d may (%d at once, %v per second)", passed, n, elapsed, most, capacity, rate)
	}
	if passed == n {
		rp.t.Errorf("all %d requests passed in %v: the limit did not apply", n, elapsed)
	}
}

// attempt runs fn up to three times while it reports that it ran too slowly
// for its assertion to be decided, e.g. a burst spread over more than a
// window on a loaded machine. Each attempt must use fresh identities.
func attempt(t *testing.T, fn func(try int) (slow bool)) {
	t.Helper()
	for try := range 3 {
		if !fn(try) {
			return
		}
		t.Logf("attempt %d ran too slowly to decide; trying again", try+1)
	}
	t.Fatal("three attempts ran too slowly to decide")
}

// TestReplayDemo replays against the running server exactly the
// descriptors envoy.yaml and envoy-tcp.yaml produce for the README's
// walkthrough, over gRPC and over /json, with counters in Redis as in
// docker-compose.yml, and checks what the README promises.
func TestReplayDemo(t *testing.T) {
	b, err := loadBootstrap(envoyHTTPFile)
	if err != nil {
		t.Fatal(err)
	}
	model, err := newHTTPModel(b, envoyHTTPPort)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := loadBootstrap(envoyTCPFile)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := newTCPModel(tb, envoyTCPPort)
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)

	for _, tr := range []string{"grpc", "json"} {
		t.Run(tr, func(t *testing.T) {
			p := startFloodgate(t, "-redis", redis.Addr, "-key-prefix", tr+":")
			var d decider = jsonDecider{p}
			if tr == "grpc" {
				d = grpcDecider{dialRLS(t, p.GRPC)}
			}
			rp := &replay{t: t, model: model, d: d, domain: model.filter.GetDomain()}
			replayDemo(t, rp, tcp, p)
		})
	}
}

func replayDemo(t *testing.T, rp0 *replay, tcp *tcpModel, p *floodgateProc) {
	run := func(name string, fn func(t *testing.T, rp *replay)) {
		t.Run(name, func(t *testing.T) {
			rp := *rp0
			rp.t = t
			fn(t, &rp)
		})
	}

	run("a client IP gets 20 at once, then 10 per second", func(t *testing.T, rp *replay) {
		r := newRequest("GET", "/", "203.0.113.7")
		first := rp.send(r)
		if got := first.GetStatuses()[0].GetLimitRemaining(); got != 19 {
			t.Errorf("first request: limit_remaining %d, want 19 (a bucket of 20)", got)
		}
		rp.burst(24, 19, 10, func(int) request { return r })
		time.Sleep(150 * time.Millisecond) // at least one token back
		if resp := rp.send(r); over(resp) {
			t.Errorf("refused 150ms after the burst (%s): the bucket refills 10 per second", codes(resp))
		}
		if resp := rp.send(newRequest("GET", "/", "203.0.113.70")); over(resp) {
			t.Errorf("another client IP was refused (%s): buckets are per IP", codes(resp))
		}
	})

	run("a client gets 20 TCP connections at once", func(t *testing.T, rp *replay) {
		peer := netip.MustParseAddr("203.0.113.71")
		descs, err := tcp.descriptors(peer)
		if err != nil {
			t.Fatal(err)
		}
		passed := 0
		start := time.Now()
		for range 25 {
			if !over(rp.sendDescriptors(descs)) {
				passed++
			}
		}
		if elapsed := time.Since(start); passed < 20 || passed > 20+int(10*elapsed.Seconds())+1 {
			t.Errorf("%d of 25 connections passed in %v; want 20 plus the refill", passed, elapsed)
		}
	})

	run("the abusive address is always refused", func(t *testing.T, rp *replay) {
		resp := rp.send(newRequest("GET", "/", "172.18.0.1", "x-forwarded-for: 192.0.2.66"))
		if !over(resp) {
			t.Errorf("192.0.2.66 was let through (%s)", codes(resp))
		}
	})

	run("the monitoring host is never limited", func(t *testing.T, rp *replay) {
		for i := range 30 {
			resp := rp.send(newRequest("GET", "/", "172.18.0.1", "x-forwarded-for: 10.0.0.10"))
			if over(resp) {
				t.Fatalf("request %d from 10.0.0.10 was refused (%s)", i+1, codes(resp))
			}
			if st := resp.GetStatuses()[0]; st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 1<<32-1 {
				t.Fatalf("unlimited status: %v", st)
			}
		}
	})

	run("an API key gets 5 per second", func(t *testing.T, rp *replay) {
		attempt(t, func(try int) bool {
			key := fmt.Sprintf("x-api-key: alice-%d", try)
			ip := fmt.Sprintf("203.0.113.%d", 20+try)
			var last *rlsv3.RateLimitResponse
			start := time.Now()
			for i := range 6 {
				last = rp.send(newRequest("GET", "/orders", ip, key))
				if i < 5 && over(last) {
					t.Fatalf("request %d with the key was refused (%s)", i+1, codes(last))
				}
			}
			// The sliding window's estimate refuses the 6th when the 6 fit
			// in a fifth of the window whatever its phase.
			if time.Since(start) > 200*time.Millisecond {
				return true
			}
			if !over(last) || codes(last) != "OK OVER_LIMIT" {
				t.Errorf("6th request in a second: %s %s, want the api_key descriptor over", last.GetOverallCode(), codes(last))
			}
			if l := last.GetStatuses()[1].GetCurrentLimit(); l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
				t.Errorf("current_limit %v, want 5 per SECOND", l)
			}
			return false
		})
	})

	run("an API key gets 2 exports at once, then one per 100s", func(t *testing.T, rp *replay) {
		r := newRequest("GET", "/export/report.csv", "203.0.113.30", "x-api-key: bob")
		for i := range 2 {
			if resp := rp.send(r); over(resp) {
				t.Fatalf("export %d refused (%s)", i+1, codes(resp))
			}
		}
		resp := rp.send(r)
		if !over(resp) || codes(resp) != "OVER_LIMIT OK OK" {
			t.Errorf("3rd export: %s %s, want the (api_key, path) descriptor over", resp.GetOverallCode(), codes(resp))
		}
		if resp := rp.send(newRequest("GET", "/export/other.csv", "203.0.113.30", "x-api-key: bob")); over(resp) {
			t.Errorf("another export path was refused (%s): each path has its own bucket", codes(resp))
		}
	})

	run("writes share 50 at once, then 10 per second", func(t *testing.T, rp *replay) {
		// From many addresses, so that the per-IP bucket is not what stops them.
		rp.burst(60, 50, 10, func(i int) request {
			return newRequest("POST", "/orders", fmt.Sprintf("198.51.100.%d", i+1))
		})
		if resp := rp.send(newRequest("GET", "/orders", "198.51.100.200")); over(resp) {
			t.Errorf("a read was refused after the writes (%s)", codes(resp))
		}
	})

	run("searches get the override: 5 per minute", func(t *testing.T, rp *replay) {
		r := newRequest("GET", "/api/v1/search?q=floodgate", "203.0.113.40")
		for i := range 5 {
			resp := rp.send(r)
			if over(resp) {
				t.Fatalf("search %d refused (%s)", i+1, codes(resp))
			}
			if l := resp.GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
				t.Fatalf("search current_limit %v, want the override 5 per MINUTE", l)
			}
		}
		if resp := rp.send(r); !over(resp) || codes(resp) != "OVER_LIMIT OK" {
			t.Errorf("6th search: %s %s, want the path descriptor over", resp.GetOverallCode(), codes(resp))
		}
	})

	run("crawlers are counted, never refused", func(t *testing.T, rp *replay) {
		attempt(t, func(try int) bool {
			ua := fmt.Sprintf("user-agent: Examplebot/%d", try)
			minute := time.Now().Truncate(time.Minute)
			for i := range 31 {
				resp := rp.send(newRequest("GET", "/", fmt.Sprintf("198.51.%d.%d", 101+try, i+1), ua))
				if over(resp) || strings.Contains(codes(resp), "OVER") {
					t.Fatalf("crawler request %d: %s %s, want OK (shadow mode)", i+1, resp.GetOverallCode(), codes(resp))
				}
			}
			if time.Now().Truncate(time.Minute) != minute {
				return true // the 31 straddled two fixed windows
			}
			metric := fmt.Sprintf(`floodgate_shadow_mode_total{domain="demo",rule="demo.user_agent_*bot*"} %d`, try+1)
			if m := metrics(t, p); !strings.Contains(m, metric) {
				t.Errorf("/metrics lacks %s:\n%s", metric, grepLines(m, "shadow_mode"))
			}
			return false
		})
	})

	run("a live edit of a rule applies within a second", func(t *testing.T, rp *replay) {
		r := newRequest("GET", "/", "172.18.0.1", "x-forwarded-for: 192.0.2.66")
		if !over(rp.send(r)) {
			t.Fatal("192.0.2.66 was let through before the edit")
		}
		file := filepath.Join(p.Dir, "config", "demo.yaml")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		edited := bytes.Replace(data, []byte("requests_per_unit: 0\n"), []byte("requests_per_unit: 100\n"), 1)
		if bytes.Equal(edited, data) {
			t.Fatal("config/demo.yaml has no requests_per_unit: 0 to edit")
		}
		if err := os.WriteFile(file, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(file, data, 0o644)
		edit := time.Now()
		for over(rp.send(r)) {
			if time.Since(edit) > time.Second {
				t.Fatalf("192.0.2.66 still refused 1s after the edit:\n%s", p.logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("the edit applied after %v", time.Since(edit).Round(time.Millisecond))
	})

	run("the health service Envoy checks is SERVING", func(t *testing.T, rp *replay) {
		c := dialRLS(t, p.GRPC)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, name := range []string{"ratelimit", ""} {
			resp, err := grpc_health_v1.NewHealthClient(c.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: name})
			if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
				t.Errorf("health of %q: %v %v", name, resp.GetStatus(), err)
			}
		}
	})
}

// metrics returns floodgate's /metrics page.
func metrics(t testing.TB, p *floodgateProc) string {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
