package redislimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// TestEarlierLayoutsRead: counters written in the layouts of earlier
// releases keep counting after an upgrade: hashes (before fixed windows
// and buckets became strings) and fixed windows' strings
// "<start>:<count>" (before plain fixed windows became integers); their
// next write turns them into the current layout, which reads back the same.
func TestEarlierLayoutsRead(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "old:")
	ctx := context.Background()
	now := clk.micros()
	hour := time.Hour.Microseconds()
	fixed := limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour}
	tests := []struct {
		spec   limit.Spec
		fields []any  // a hash's
		str    string // or a string
		want   int64  // remaining after one hit of cost 1
	}{
		{spec: fixed, fields: []any{"s", now / hour * hour, "n", 3}, want: 6},
		{spec: fixed, fields: []any{"s", now/hour*hour - hour, "n", 3}, want: 9},
		{spec: fixed, str: fmt.Sprintf("%d:4", now/hour*hour), want: 5},
		{spec: fixed, str: fmt.Sprintf("%d:4", now/hour*hour-hour), want: 9},
		{spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Hour}, fields: []any{"v", "2.5", "t", now}, want: 1},
		{spec: limit.Spec{Algorithm: limit.LeakyBucket, Limit: 10, Window: time.Hour}, fields: []any{"v", "7.5", "t", now}, want: 1},
	}
	for i, tc := range tests {
		key := fmt.Sprint("k", i)
		full := redislimit.Key("old:", key)
		old := fmt.Sprint(tc.fields...)
		if tc.str != "" {
			old = tc.str
			if err := n.client.Set(ctx, full, tc.str, 0).Err(); err != nil {
				t.Fatal(err)
			}
		} else if err := n.client.HSet(ctx, full, tc.fields...).Err(); err != nil {
			t.Fatal(err)
		}
		n.client.Expire(ctx, full, time.Hour)
		d := decide(t, l, limit.Hit{Key: key, Spec: tc.spec, Cost: 1})[0]
		if !d.Allowed || d.Remaining != tc.want {
			t.Errorf("%v over %q: %+v, want allowed with %d remaining", tc.spec.Algorithm, old, d, tc.want)
		}
		v, err := n.client.Get(ctx, full).Result()
		if err != nil || v == old {
			t.Errorf("%v over %q: key holds %q (%v) after a write, want the current layout", tc.spec.Algorithm, old, v, err)
		}
		if p := decide(t, l, limit.Hit{Key: key, Spec: tc.spec})[0]; p.Remaining != tc.want {
			t.Errorf("%v: remaining %d read back from %q, want %d", tc.spec.Algorithm, p.Remaining, v, tc.want)
		}
	}
}
