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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ports "github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// deadRedis returns a Redis limiter pointed at a port where nothing
// listens: every call fails at once with redislimit.ErrStore.
func deadRedis(t *testing.T) *redislimit.Limiter {
	t.Helper()
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: fmt.Sprintf("127.0.0.1:%d", ports.FreePort(t))})
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
			svc, err := New(fixedRules{set}.Current, store, Options{FailureMode: tc.global})
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
		})
	}
}

func TestCanceledRequestIsNotAStoreFailure(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(fixedRules{set}.Current, deadRedis(t), Options{FailureMode: rules.FailureDeny})
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

// TestFailureLogIsRateLimited: a burst of failures within the interval
// (the last one a nanosecond before it ends) writes one line; the first
// failure at the interval writes the next, counting the unlogged ones.
func TestFailureLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	svc := &Service{opts: Options{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Now: func() time.Time { return now }}}
	boom := errors.New("boom")
	for i := range 100 {
		if i == 99 {
			now = t0.Add(time.Second - time.Nanosecond)
		}
		svc.logFailure(boom)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for a burst of 100 failures, want 1:\n%s", n, buf.String())
	}
	now = t0.Add(time.Second)
	svc.logFailure(boom)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "failures=1") || !strings.Contains(lines[1], "failures=100") {
		t.Fatalf("want a first line with failures=1 and a second counting the 99 unlogged and the new one:\n%s", buf.String())
	}
}

// TestServiceFailureLogClock: the Service paces its failure log with
// Options.Now, so a clock that stands still keeps it to one line however
// many requests fail, and moving it a second lets the next line out.
func TestServiceFailureLogClock(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	svc, err := New(fixedRules{set}.Current, deadRedis(t), Options{
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Now:    func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	fail := func(n int) {
		for range n {
			if _, err := svc.ShouldRateLimit(context.Background(), request("test", desc("user", "a"))); err != nil {
				t.Fatal(err) // fails open: an answer, not an error
			}
		}
	}
	fail(3)
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 3 failures at one instant, want 1:\n%s", n, buf.String())
	}
	now = now.Add(time.Second)
	fail(1)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "failures=3") {
		t.Fatalf("want a second line a second later counting the 2 unlogged and the new one:\n%s", buf.String())
	}
}

// blockingStore blocks until the call's deadline, then fails as a store
// does: wrapping the context's error, or (unwrapped) with its socket's
// own timeout.
type blockingStore struct{ wrap bool }

func (b blockingStore) Evaluate(ctx context.Context, _ []limit.Hit, _ []limit.Decision) (bool, error) {
	<-ctx.Done()
	if b.wrap {
		return false, fmt.Errorf("store: %w", ctx.Err())
	}
	return false, errors.New("read tcp 127.0.0.1:1234: i/o timeout")
}

// failingStore fails every call, as Redis does when it is down.
type failingStore struct{}

func (failingStore) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	return false, errors.New("connection refused")
}

// openBreakerStore fails at once as a store whose circuit breaker is open.
// fullStore fails as a full in-memory store does.
type fullStore struct{}

func (fullStore) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	return false, fmt.Errorf("no room in shard 0: %w", limit.ErrFull)
}

type openBreakerStore struct{}

func (openBreakerStore) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	return false, fmt.Errorf("store: %w after repeated failures", limit.ErrCircuitOpen)
}

// storeFailure returns the storeFailure struct of resp's dynamic_metadata
// as "cause/policy", or "" without one.
func storeFailure(resp *pb.RateLimitResponse) string {
	f := resp.GetDynamicMetadata().GetFields()[storeFailureKey].GetStructValue().GetFields()
	if f == nil {
		return ""
	}
	return f["cause"].GetStringValue() + "/" + f["policy"].GetStringValue()
}

// TestFailureAnswersSayWhy: an answer given by the failure policy says so
// in its dynamic_metadata (with -response-dynamic-metadata off), and in a
// header when asked, with the cause and the policy; Unavailable names the
// cause (internal/rlsmetrics counts them by mode and cause). Answers
// the store decided, and answers of unknown domains, carry none of it.
func TestFailureAnswersSayWhy(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		store  limit.Limiter
		global rules.FailureMode
		header string
		want   string // cause/policy, or the error's code and cause
	}{
		{"deadline, allowed", blockingStore{wrap: true}, rules.FailureAllow, "", "deadline/allow"},
		{"deadline the store does not wrap, denied", blockingStore{}, rules.FailureDeny, "", "deadline/deny"},
		{"deadline, unavailable", blockingStore{wrap: true}, rules.FailureUnavailable, "", "Unavailable (deadline)"},
		{"circuit open, allowed, with the header", openBreakerStore{}, rules.FailureAllow, "x-ratelimit-store-failure", "circuit_open/allow"},
		{"circuit open, unavailable", openBreakerStore{}, rules.FailureUnavailable, "", "Unavailable (circuit_open)"},
		{"other error, denied, with the header", failingStore{}, rules.FailureDeny, "x-ratelimit-store-failure", "error/deny"},
		{"memory store full, allowed", fullStore{}, rules.FailureAllow, "", "store_full/allow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := New(fixedRules{set}.Current, tc.store, Options{FailureMode: tc.global, StoreFailureHeader: tc.header})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, ok := tc.store.(blockingStore); ok {
				// The caller's deadline, as Envoy sends its filter's
				// timeout: the blocking store ends there. The others get
				// none: on a busy machine it could pass before they fail,
				// and the cause would then rightly be the deadline.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Millisecond)
				defer cancel()
			}
			resp, err := svc.ShouldRateLimit(ctx, request("test", desc("user", "a")))
			var got, cause string
			if err != nil {
				_, c, _ := strings.Cut(status.Convert(err).Message(), "(")
				cause, _, _ = strings.Cut(c, ")")
				got = status.Code(err).String() + " (" + cause + ")"
			} else {
				got = storeFailure(resp)
				cause, _, _ = strings.Cut(got, "/")
				hdr := headerMap(resp)[tc.header]
				if tc.header != "" && hdr != cause {
					t.Errorf("header %s = %q, want %q", tc.header, hdr, cause)
				}
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	// Neither a decision nor an unknown domain says anything of the kind.
	h := newHarness(t, Options{StoreFailureHeader: "x-ratelimit-store-failure"})
	for _, req := range []*pb.RateLimitRequest{request("test", desc("user", "a")), request("nowhere", desc("user", "a"))} {
		resp, err := h.svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := storeFailure(resp); got != "" || headerMap(resp)["x-ratelimit-store-failure"] != "" {
			t.Errorf("%s: a decided answer says the store failed: %q %v", req.Domain, got, headerMap(resp))
		}
	}
	if _, err := New(fixedRules{set}.Current, failingStore{}, Options{StoreFailureHeader: "bad header"}); err == nil || !strings.Contains(err.Error(), `"bad header"`) {
		t.Errorf("a header name with a space: err = %v, want one naming it", err)
	}
}

// TestFrozenRedisAnswerSaysDeadline: with a real Redis that stops
// answering (SIGSTOP), the answer the failure policy gives carries the
// deadline as its cause.
func TestFrozenRedisAnswerSaysDeadline(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	// A deadline a busy machine meets for the first call, which loads the
	// script; a frozen Redis misses any deadline.
	store, err := redislimit.New(client, redislimit.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(fixedRules{set}.Current, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ask := func() *pb.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), request("test", desc("user", "a")))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := ask(); storeFailure(resp) != "" || resp.Statuses[0].GetCurrentLimit() == nil {
		t.Fatalf("Redis up: %v, want a decision", resp)
	}
	srv.Freeze()
	defer srv.Thaw()
	resp := ask()
	if got := storeFailure(resp); got != "deadline/allow" {
		t.Errorf("Redis frozen: storeFailure %q, want deadline/allow (%v)", got, resp)
	}
}
