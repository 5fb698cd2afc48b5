package envoy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// deadRedis returns a Redis limiter pointed at a port where nothing
// listens: every call fails at once with redislimit.ErrStore.
func deadRedis(t *testing.T) *redislimit.Limiter {
	t.Helper()
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	l, err := redislimit.New(client, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestStoreFailurePolicy(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := deadRedis(t)
	tests := []struct {
		name   string
		global rules.FailureMode
		req    *pb.RateLimitRequest
		want   string // overall and statuses, or the gRPC code
	}{
		{"fail open by default", rules.FailureDefault, request("test", desc("user", "a")), "OK OK:-"},
		{"a rule's deny wins over the global allow", rules.FailureAllow, request("test", desc("user", "a"), desc("strict", "x")), "OVER OK:- OVER:0"},
		{"a rule's unavailable wins over the global allow", rules.FailureAllow, request("test", desc("user", "a"), desc("ask", "x")), "Unavailable"},
		{"deny wins over unavailable", rules.FailureAllow, request("test", desc("ask", "x"), desc("strict", "x")), "OVER OK:- OVER:0"},
		{"global deny", rules.FailureDeny, request("test", desc("user", "a"), desc("open", "x")), "OVER OVER:0 OK:-"},
		{"global unavailable", rules.FailureUnavailable, request("test", desc("user", "a")), "Unavailable"},
		{"shadow mode keeps a denial OK", rules.FailureDeny, request("test", desc("shadow", "s")), "OK OK:0"},
		{"no store call, no failure", rules.FailureUnavailable, request("test", desc("free", "x"), desc("nomatch", "y")), "OK OK:max OK:-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg, MetricsOptions{Store: "redis"})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := New(fixedRules{set}, store, Options{FailureMode: tc.global, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := svc.ShouldRateLimit(context.Background(), tc.req)
			got := ""
			if err != nil {
				got = status.Code(err).String()
				if !strings.Contains(err.Error(), "store failed") {
					t.Errorf("error %q does not say the store failed", err)
				}
			} else {
				got = strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			wantErrors := 1.0
			if tc.name == "no store call, no failure" {
				wantErrors = 0
			}
			if n := metricValue(t, reg, "floodgate_store_errors_total", map[string]string{"store": "redis"}); n != wantErrors {
				t.Errorf("store errors = %v, want %v", n, wantErrors)
			}
		})
	}
}

func TestCanceledRequestIsNotAStoreFailure(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(fixedRules{set}, deadRedis(t), Options{FailureMode: rules.FailureDeny})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = svc.ShouldRateLimit(ctx, request("test", desc("user", "a")))
	if status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
}

func TestFailureLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	f := newFailureLog(slog.New(slog.NewTextHandler(&buf, nil)), 50*time.Millisecond)
	boom := errors.New("boom")
	for range 100 {
		f.record(boom)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for a burst of 100 failures, want 1:\n%s", n, buf.String())
	}
	time.Sleep(60 * time.Millisecond)
	f.record(boom)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "failures=1") || !strings.Contains(lines[1], "failures=100") {
		t.Fatalf("want a first line with failures=1 and a second counting the 99 unlogged and the new one:\n%s", buf.String())
	}
}
