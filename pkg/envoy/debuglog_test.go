package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// TestDebugLogsEachDecision: at debug level each answer is one line with
// the domain, the overall code or error, each descriptor (keys, its rule,
// code, remaining and limit name) and the duration; request values appear
// only for rules that name metrics by them; at info level nothing is
// logged.
func TestDebugLogsEachDecision(t *testing.T) {
	const secret = "s3cret-api-key"
	tests := []struct {
		name  string
		store limit.Limiter // nil: the harness's in-memory store
		req   *pb.RateLimitRequest
		want  map[string]any // fields of the line, besides msg, level, time and duration
	}{
		{
			name: "decided, several descriptors",
			req:  request("test", desc("user", secret), desc("tenant", "t"), desc("nomatch", "x"), desc("free", "f")),
			want: map[string]any{"domain": "test", "code": "OK", "descriptors": []any{
				"user=(hidden) OK rule=test.user remaining=2",
				"tenant=(hidden) OK rule=test.tenant remaining=1 limit=daily",
				"nomatch=(hidden) OK no rule",
				"free=(hidden) OK rule=test.free",
			}},
		},
		{
			name: "over the limit, a detailed_metric rule shows its value, an override",
			req:  request("test", desc("zero", secret), desc("detailed", "v1"), withOverride(desc("nomatch", secret), 5, typev3.RateLimitUnit_MINUTE, 0)),
			want: map[string]any{"domain": "test", "code": "OVER_LIMIT", "descriptors": []any{
				"zero=(hidden) OVER_LIMIT rule=test.zero remaining=0",
				"detailed=v1 OK rule=test.detailed remaining=5", // refused: not charged
				"nomatch=(hidden) OK rule=(override) remaining=5",
			}},
		},
		{
			name: "unknown domain",
			req:  request("nowhere", desc("user", secret)),
			want: map[string]any{"domain": "nowhere", "code": "OK", "domain_known": false, "descriptors": []any{"user=(hidden) OK"}},
		},
		{
			name:  "answered by the failure policy",
			store: failingStore{},
			req:   request("test", desc("user", secret)),
			want: map[string]any{"domain": "test", "code": "OK", "store_failure": "error", "policy": "allow",
				"descriptors": []any{"user=(hidden) OK rule=test.user"}},
		},
		{
			name: "invalid",
			req:  request("test", desc("", secret)),
			want: map[string]any{"domain": "test", "code": "InvalidArgument", "err": "descriptors[0].entries[0].key: must not be empty"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
				var buf bytes.Buffer
				h := newHarness(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))})
				if tc.store != nil {
					h.svc.limiter = tc.store
				}
				h.svc.ShouldRateLimit(context.Background(), tc.req)
				out := buf.String()
				if level == slog.LevelInfo {
					if strings.Contains(out, `"msg":"decision"`) {
						t.Errorf("a decision logged at info level: %s", out)
					}
					continue
				}
				if strings.Contains(out, secret) {
					t.Errorf("a request value is in the log: %s", out)
				}
				lines := strings.Split(strings.TrimSpace(out), "\n")
				i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"msg":"decision"`) })
				if i < 0 {
					t.Fatalf("no decision line: %s", out)
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
					t.Fatal(err)
				}
				if d, ok := got["duration"].(float64); !ok || d <= 0 {
					t.Errorf("duration %v, want a positive one", got["duration"])
				}
				for _, k := range []string{"time", "level", "msg", "duration"} {
					delete(got, k)
				}
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				if string(g) != string(w) {
					t.Errorf("decision line\n got %s\nwant %s", g, w)
				}
			}
		})
	}
}
