package main

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/settings"
)

// defaultGOGC is the garbage collector's target (GOGC) when the
// environment sets none. The live heap is small while every request
// allocates, so Go's default of 100 collects often for little gain; 400
// also lets a large rule set load with few collections. Memory a load
// leaves free goes back after it (releaseAfterLoads), and in a container
// the soft memory limit bounds the rest (memoryLimitShare). The figures
// are in docs/benchmarks.md, "cmd/server".
const defaultGOGC = 400

// memoryLimitShare is the share of the container's memory limit set as
// the runtime's soft limit (GOMEMLIMIT) when the environment sets none:
// near it the collector works harder instead of the kernel killing the
// process; the rest is for memory the runtime does not manage.
const memoryLimitShare = 0.9

// gcSettings is what floodgate sets in the garbage collector at start:
// the GC target and the soft memory limit. 0 leaves the runtime's own:
// GOGC or GOMEMLIMIT set (even GOGC=off), or no cgroup limit found.
type gcSettings struct {
	gogc     int
	memLimit int64
}

// gcDefaults returns the settings floodgate applies for the environment
// and the cgroup files under root (normally "/").
func gcDefaults(env settings.Lookup, root string) gcSettings {
	var s gcSettings
	if !isSet(env, "GOGC") {
		s.gogc = defaultGOGC
	}
	if !isSet(env, "GOMEMLIMIT") {
		if limit := cgroupMemoryLimit(root); limit > 0 {
			s.memLimit = int64(float64(limit) * memoryLimitShare)
		}
	}
	return s
}

// isSet reports whether the environment sets name to a value, as the Go
// runtime reads it: empty counts as unset.
func isSet(env settings.Lookup, name string) bool {
	v, ok := env(name)
	return ok && v != ""
}

// applyGCDefault applies gcDefaults, with the cgroup files under root, to
// the process. It changes process-wide state, so only main calls it,
// before anything allocates much.
func applyGCDefault(env settings.Lookup, root string) {
	s := gcDefaults(env, root)
	if s.gogc > 0 {
		debug.SetGCPercent(s.gogc)
	}
	if s.memLimit > 0 {
		debug.SetMemoryLimit(s.memLimit)
	}
}

// releaseAfterLoads returns to the operating system the memory that
// loading the rules left unused: at once, for the first load, and after
// each later load once the set it replaced has been collected, until ctx
// ends. Without it the free pages would go back only at the runtime's
// pace, and not at all while the heap stays under its target. It costs a
// collection per load, more when a request still holds the old set.
func releaseAfterLoads(ctx context.Context, src ruleSource) {
	debug.FreeOSMemory()
	for {
		changed := src.Changed()
		collected := make(chan struct{})
		runtime.AddCleanup(src.Current(), func(ch chan struct{}) { close(ch) }, collected)
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
		releaseCollected(ctx, collected)
	}
}

// releaseTries bounds the collections releaseCollected asks for.
const releaseTries = 5

// releaseCollected calls debug.FreeOSMemory, a second apart and at most
// releaseTries times, until collected tells that the replaced rule set
// was freed: a request may still hold it, and an idle server collects
// nothing by itself.
func releaseCollected(ctx context.Context, collected <-chan struct{}) {
	for range releaseTries {
		debug.FreeOSMemory()
		select {
		case <-collected:
			return
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
	}
}

// cgroupMemoryLimit returns the smallest memory limit, in bytes, of the
// process's cgroup and those above it (v1 and v2), read from the files
// under root; 0 when none is set or readable.
func cgroupMemoryLimit(root string) int64 {
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0
	}
	var limit int64
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controllers:path; v2 is "0::path".
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			limit = smallestLimit(limit, filepath.Join(root, "sys/fs/cgroup"), parts[2], "memory.max")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			limit = smallestLimit(limit, filepath.Join(root, "sys/fs/cgroup/memory"), parts[2], "memory.limit_in_bytes")
		}
	}
	return limit
}

// smallestLimit returns the smallest of limit (0: none) and the limits in
// file of the cgroup path under mount and of each directory above it.
// Directories that do not exist (a cgroup namespace shows the cgroup as
// the mount) are skipped.
func smallestLimit(limit int64, mount, path, file string) int64 {
	dir := filepath.Join(mount, filepath.Clean("/"+path))
	for {
		if l := readLimit(filepath.Join(dir, file)); l > 0 && (limit == 0 || l < limit) {
			limit = l
		}
		if dir == mount || !strings.HasPrefix(dir, mount) {
			return limit
		}
		dir = filepath.Dir(dir)
	}
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max"
// (v2), or a number near 2^63 (v1's "unlimited"); it returns 0 for no
// limit or an unreadable file.
func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}

// gcInEffect returns the runtime's GC target in percent (-1: off) and its
// memory limit in bytes (-1: none), as in force whoever set them.
func gcInEffect() (gogc, memLimit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	gogc, memLimit = -1, debug.SetMemoryLimit(-1) // a negative limit only reads it
	if v := s[0].Value.Uint64(); v <= math.MaxInt32 {
		gogc = int64(v)
	}
	if memLimit == math.MaxInt64 {
		memLimit = -1
	}
	return gogc, memLimit
}

// logGC logs the garbage collector's settings in force and where they came
// from, once at start.
func logGC(logger *slog.Logger, env settings.Lookup) {
	gogc, memLimit := gcInEffect()
	attrs := []any{"gogc", gogc, "gogc_from", "GOGC"}
	if !isSet(env, "GOGC") {
		attrs[3] = "default"
	}
	switch {
	case memLimit < 0:
		attrs = append(attrs, "gomemlimit_bytes", "none")
	case isSet(env, "GOMEMLIMIT"):
		attrs = append(attrs, "gomemlimit_bytes", memLimit, "gomemlimit_from", "GOMEMLIMIT")
	default:
		attrs = append(attrs, "gomemlimit_bytes", memLimit, "gomemlimit_from", "cgroup")
	}
	logger.Info("garbage collector", attrs...)
}
