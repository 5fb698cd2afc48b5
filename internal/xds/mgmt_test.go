package xds

import (
	"strconv"
	"testing"
	"time"
)

// waitFor polls cond every few milliseconds for up to 10 s, failing the
// test with what when it never holds, and returns how long it took.
func waitFor(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return time.Since(start)
		}
	}
	t.Fatalf("timed out waiting for %s", what)
	return 0
}

func itoa(n int) string { return strconv.Itoa(n) }
