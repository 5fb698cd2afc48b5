package statsd

import (
	"runtime"
)

// RuntimeStats adds the Go runtime's stats under prefix, named and typed as
// lyft/gostats does for the reference server ("ratelimit.go"), read once
// per flush. Call it once.
func (c *Client) RuntimeStats(prefix string) {
	var ms runtime.MemStats
	c.beforeFlush(func() { runtime.ReadMemStats(&ms) })
	for _, s := range []struct {
		name  string
		gauge bool
		read  func() uint64
	}{
		{"alloc", true, func() uint64 { return ms.Alloc }},
		{"sys", true, func() uint64 { return ms.Sys }},
		{"heapAlloc", true, func() uint64 { return ms.HeapAlloc }},
		{"heapSys", true, func() uint64 { return ms.HeapSys }},
		{"heapIdle", true, func() uint64 { return ms.HeapIdle }},
		{"heapInuse", true, func() uint64 { return ms.HeapInuse }},
		{"heapReleased", true, func() uint64 { return ms.HeapReleased }},
		{"heapObjects", true, func() uint64 { return ms.HeapObjects }},
		{"nextGC", true, func() uint64 { return ms.NextGC }},
		{"lastGC", true, func() uint64 { return ms.LastGC }},
		{"gcCPUPercent", true, func() uint64 { return uint64(ms.GCCPUFraction * 100) }},
		{"numGoroutine", true, func() uint64 { return uint64(runtime.NumGoroutine()) }},
		{"totalAlloc", false, func() uint64 { return ms.TotalAlloc }},
		{"mallocs", false, func() uint64 { return ms.Mallocs }},
		{"frees", false, func() uint64 { return ms.Frees }},
		{"pauseTotalNs", false, func() uint64 { return ms.PauseTotalNs }},
		{"numGC", false, func() uint64 { return uint64(ms.NumGC) }},
	} {
		c.funcStat(prefix+"."+s.name, s.read, s.gauge)
	}
}
