package rules

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// largeDomain returns a rule file of one domain of n rules, each a value
// of its own with a limit, as cmd/bench -rules writes them: about 100
// bytes of YAML per rule.
func largeDomain(n int) []byte {
	var b strings.Builder
	b.Grow(110 * n)
	b.WriteString("domain: large\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - key: key1\n    value: v%d\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000000\n", i)
	}
	return []byte(b.String())
}

// heapMetric returns a runtime/metrics value in bytes.
func heapMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeap collects and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	return heapMetric("/memory/classes/heap/objects:bytes")
}

// peakHeap runs f and returns the most the heap's objects took while it
// ran above the live heap before, sampled every 100 µs or so with the
// collector at GOGC=10, which keeps the garbage among them near a tenth
// of the live heap. A sample missed on a busy machine makes the figure
// lower, never higher.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	base := liveHeap()
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var most uint64
		for {
			most = max(most, heapMetric("/memory/classes/heap/objects:bytes"))
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	f()
	close(done)
	return max(<-peak, base) - base
}

// Memory bounds of loading a large domain, in multiples of its file's
// size: the heap a load may take at its peak above what was live before,
// and what the loaded rules keep. Measured for 10,000 to 100,000 rules:
// a peak of 6 to 7.6 times the file and rules of 5.5 times; parsing the
// whole file into one YAML tree peaked at 25 times.
const (
	maxLoadPeak = 10
	maxRuleSet  = 7
)

// TestLoadMemoryBounded loads a generated domain of 10,000 rules (1 MB of
// YAML) and holds the heap's peak during the load, and what the rules keep
// after it, to a multiple of the file's size; then loads it again beside
// the first set, as a reload does, within the same bound above it.
func TestLoadMemoryBounded(t *testing.T) {
	const n = 10_000
	data := largeDomain(n)
	size := uint64(len(data))
	load := func() *Set {
		set, err := Parse(map[string][]byte{"large.yaml": data}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(set.rules); got != n {
			t.Fatalf("%d rules, want %d", got, n)
		}
		return set
	}
	before := liveHeap()
	var first *Set
	peak := peakHeap(func() { first = load() })
	kept := liveHeap() - min(before, liveHeap())
	t.Logf("%d rules, %d bytes: load peak %.1f x the file, rules %.1f x", n, size, float64(peak)/float64(size), float64(kept)/float64(size))
	if peak > maxLoadPeak*size {
		t.Errorf("loading took %d bytes of heap at its peak, %.1f times the file; want at most %d times", peak, float64(peak)/float64(size), maxLoadPeak)
	}
	if kept > maxRuleSet*size {
		t.Errorf("the rules keep %d bytes, %.1f times the file; want at most %d times", kept, float64(kept)/float64(size), maxRuleSet)
	}
	var second *Set
	again := peakHeap(func() { second = load() })
	t.Logf("reload beside the rules in force: peak %.1f x the file above them", float64(again)/float64(size))
	if again > maxLoadPeak*size {
		t.Errorf("loading again beside the rules in force took %d bytes above them, %.1f times the file; want at most %d times",
			again, float64(again)/float64(size), maxLoadPeak)
	}
	runtime.KeepAlive(first)
	runtime.KeepAlive(second)
}
