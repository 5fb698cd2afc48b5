package redislimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// TestScriptRefusesMalformedCalls: a call whose arguments break the
// script's layout fails as a whole with an error naming what is wrong, at
// once and before writing anything, even when its first requests are
// well formed.
func TestScriptRefusesMalformedCalls(t *testing.T) {
	n := startNode(t)
	l := newLimiter(t, n.client, nil, "malformed:")
	ctx := context.Background()
	if err := l.Probe(ctx); err != nil { // loads the library
		t.Fatal(err)
	}
	spec := fmt.Sprintf("%d:10:%d:10:1", limit.FixedWindow, time.Hour.Microseconds())
	good := []any{"", "1", spec, "1", "0"}
	for _, tc := range []struct {
		name string
		keys []string
		args []any
		want string
	}{
		{"a now that is not a number", []string{"a", "b"}, append(append([]any{}, good...), "x", "1", spec, "1", "0"), "request 2 at argument 6: bad now x"},
		{"a bad hit count", []string{"a", "b"}, append(append([]any{}, good...), "", "0", spec, "1", "0"), "request 2 at argument 6: bad hit count 0"},
		{"more hits than keys", []string{"a"}, append(append([]any{}, good...), "", "1", spec, "1", "0"), "bad hit count 1 for 0 keys left"},
		{"a bad spec", []string{"a", "b"}, append(append([]any{}, good...), "", "1", "0:10", "1", "0"), "request 2: bad spec 0:10"},
		{"a cost that is not a number", []string{"a", "b"}, append(append([]any{}, good...), "", "1", spec, "x", "0"), "request 2: bad cost x"},
		{"a negative cost", []string{"a", "b"}, append(append([]any{}, good...), "", "1", spec, "-1", "0"), "request 2: bad cost -1"},
		{"flags that are not a number", []string{"a", "b"}, append(append([]any{}, good...), "", "1", spec, "1", "y"), "request 2: bad flags y"},
		{"a fractional hit count", []string{"a", "b", "c"}, append(append([]any{}, good...), "", "1.5", spec, "1", "0"), "request 2 at argument 6: bad hit count 1.5"},
		{"a fractional cost", []string{"a", "b"}, append(append([]any{}, good...), "", "1", spec, "1.5", "0"), "request 2: bad cost 1.5"},
		{"a cost that is not a number at all", []string{"a", "b"}, append(append([]any{}, good...), "", "1", spec, "nan", "0"), "request 2: bad cost nan"},
		{"a window of 0", []string{"a", "b"}, append(append([]any{}, good...), "", "1", fmt.Sprintf("%d:10:0:10:1", limit.FixedWindow), "1", "0"), "request 2: bad spec 0:10:0:10:1"},
		{"a precision of 0", []string{"a", "b"}, append(append([]any{}, good...), "", "1", fmt.Sprintf("%d:10:%d:10:0", limit.SlidingWindow, time.Hour.Microseconds()), "1", "0"), "request 2: bad spec 1:10:"},
		{"arguments left over", []string{"a"}, append(append([]any{}, good...), "extra"), "request 2 at argument 6: bad hit count nil"},
		// A call of a single request is checked as any other.
		{"a single request's fractional cost", []string{"a"}, []any{"", "1", spec, "1.5", "0"}, "request 1: bad cost 1.5"},
		{"a single request's negative cost", []string{"a"}, []any{"", "1", spec, "-1", "0"}, "request 1: bad cost -1"},
		{"a single request's now that is not a number", []string{"a"}, []any{"x", "1", spec, "1", "0"}, "request 1 at argument 1: bad now x"},
		{"a single request's bad spec", []string{"a"}, []any{"", "1", "0:10", "1", "0"}, "request 1: bad spec 0:10"},
		{"a single request's flags that are not a number", []string{"a"}, []any{"", "1", spec, "1", "y"}, "request 1: bad flags y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := make([]string, len(tc.keys))
			for i, k := range tc.keys {
				keys[i] = redislimit.Key("malformed:", tc.name+k)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := n.client.FCall(cctx, redislimit.FunctionName(), keys, tc.args...).Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if got := n.client.Exists(ctx, keys...).Val(); got != 0 {
				t.Errorf("%d keys written by a refused call", got)
			}
		})
	}
}
