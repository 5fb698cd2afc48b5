package redislimit

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// TestSpecArgs: the kept argument of a spec is specArg's, for specs that
// differ in any field the argument holds, and the cache starts over once
// it holds maxSpecArgs specs rather than growing with every reload.
func TestSpecArgs(t *testing.T) {
	var c specArgs
	for _, sp := range []limit.Spec{
		{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second},
		{Algorithm: limit.FixedWindow, Limit: 11, Window: time.Second},
		{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute},
		{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 3},
		{Algorithm: limit.SlidingWindow, Limit: 10, Window: time.Second, Precision: 7},
	} {
		for range 2 { // the second time from the cache
			if got, want := c.arg(&sp), specArg(&sp); got != want {
				t.Errorf("%+v: %v, want %q", sp, got, want)
			}
		}
	}
	for i := range 3 * maxSpecArgs {
		sp := limit.Spec{Algorithm: limit.FixedWindow, Limit: int64(i + 1), Window: time.Second}
		if got, want := c.arg(&sp), specArg(&sp); got != want {
			t.Fatalf("limit %d: %v, want %q", i+1, got, want)
		}
		if n := len(c.m); n > maxSpecArgs {
			t.Fatalf("%d specs held, more than %d", n, maxSpecArgs)
		}
	}
}
