package limit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/limit"
)

// try runs one call and returns its decisions and error.
func try(m *limit.Memory, hits ...limit.Hit) ([]limit.Decision, error) {
	d := make([]limit.Decision, len(hits))
	_, err := m.Evaluate(context.Background(), hits, d)
	return d, err
}

// keysIn returns n keys with the given prefix that fall in shard i of m.
func keysIn(t *testing.T, m *limit.Memory, i, n int, prefix string) []string {
	t.Helper()
	if i >= limit.Shards(m) {
		t.Fatalf("no shard %d among %d", i, limit.Shards(m))
	}
	var keys []string
	for j := 0; len(keys) < n; j++ {
		if k := fmt.Sprint(prefix, j); limit.ShardOf(m, k) == i {
			keys = append(keys, k)
		}
	}
	return keys
}

// fill creates n counters of an hour in shard i of m.
func fill(t *testing.T, m *limit.Memory, i, n int) {
	t.Helper()
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour}
	for _, k := range keysIn(t, m, i, n, fmt.Sprint("filler-", i, "-")) {
		eval(t, m, limit.Hit{Key: k, Spec: spec, Cost: 1})
	}
}

// MaxEntries of 2048 makes two shards of 1024 counters.
const twoShards, shardSize = 2048, 1024

// TestFullStoreKeepsBlockedUser is the case of a user over a limit of 10
// per hour, 32 minutes before the reset, while a flood of new descriptor
// values fills the store: the user must stay denied with the same answer
// (an evicted counter would start again and admit), the new values the
// store has no room for are refused with ErrFull, and once their windows
// are over, new values are admitted again.
func TestFullStoreKeepsBlockedUser(t *testing.T) {
	const maxEntries = 4096 // 4 shards
	for _, alg := range limit.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			spec := limit.Spec{Algorithm: alg, Limit: 10, Window: time.Hour}
			start := base.Add(28 * time.Minute)
			clk := newClock(start)
			m := limit.NewMemory(limit.MemoryOptions{MaxEntries: maxEntries, Now: clk.Now})
			user := limit.Hit{Key: "rule_user_alice", Spec: spec, Cost: 1}
			for range 10 {
				eval(t, m, user)
			}
			before := eval(t, m, user)[0]
			if before.Allowed {
				t.Fatalf("the 11th hit of a limit of 10 is allowed: %+v", before)
			}
			if alg == limit.FixedWindow {
				if want := deny(0, 32*time.Minute, 32*time.Minute); before != want {
					t.Fatalf("user before the flood: got %+v, want %+v", before, want)
				}
			}

			admitted, refused := 0, 0
			for i := range 5 * maxEntries {
				clk.Set(start.Add(time.Duration(i) * time.Microsecond))
				flood := limit.Hit{Key: fmt.Sprint("rule_user_", i), Spec: spec, Cost: 1}
				switch d, err := try(m, flood); {
				case errors.Is(err, limit.ErrFull):
					refused++
				case err != nil:
					t.Fatalf("flood value %d: %v", i, err)
				case !d[0].Allowed:
					t.Fatalf("flood value %d, a first hit, denied: %+v", i, d[0])
				default:
					admitted++
				}
			}
			clk.Set(start)
			if after := eval(t, m, user)[0]; after != before {
				t.Fatalf("user after a flood of %d new values:\n got %+v\nwant %+v (as before it)", 5*maxEntries, after, before)
			}
			st := m.Stats()
			if admitted+refused != 5*maxEntries || refused == 0 || admitted+1 > maxEntries || admitted+1 < maxEntries/2 {
				t.Fatalf("flood: %d admitted, %d refused; want at most %d held in all, and refusals", admitted, refused, maxEntries)
			}
			want := limit.MemoryStats{Entries: admitted + 1, Capacity: maxEntries, Refused: int64(refused)}
			if st != want {
				t.Fatalf("Stats after the flood = %+v, want %+v", st, want)
			}

			// Two hours on, every counter is over: room again, and the
			// user starts afresh.
			clk.Set(start.Add(2 * time.Hour))
			for i := range maxEntries / 2 {
				if d, err := try(m, limit.Hit{Key: fmt.Sprint("later_", i), Spec: spec, Cost: 1}); err != nil || !d[0].Allowed {
					t.Fatalf("new value %d after the windows ended: %+v, %v", i, d, err)
				}
			}
			if d := eval(t, m, user)[0]; !d.Allowed || d.Remaining != 9 {
				t.Fatalf("user after the reset: %+v, want allowed with 9 remaining", d)
			}
			st = m.Stats()
			want = limit.MemoryStats{Entries: maxEntries/2 + 1, Capacity: maxEntries, Refused: int64(refused), Expired: int64(admitted + 1)}
			if st != want {
				t.Fatalf("Stats after the reset = %+v, want %+v", st, want)
			}
		})
	}
}

// TestFullAllOrNothing: a call that needs a counter there is no room for
// changes none of its counters; a call that needs none is decided.
func TestFullAllOrNothing(t *testing.T) {
	probe := limit.NewMemory(limit.MemoryOptions{MaxEntries: twoShards})
	// Shard 0 is full with a0, a1 and fillers; a2, a3 are new. Shard 1
	// has room for one more with b0 and fillers; b1, b2 are new.
	s0 := keysIn(t, probe, 0, 4, "zero-")
	s1 := keysIn(t, probe, 1, 3, "one-")
	a0, a1, a2, a3, b0, b1, b2 := s0[0], s0[1], s0[2], s0[3], s1[0], s1[1], s1[2]
	// a0 is a bucket, whose counter is gone once full again; the others
	// are fixed windows, whose counters last to the end of the window.
	fixed := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute}
	specOf := func(key string) limit.Spec {
		if key == a0 {
			return limit.Spec{Algorithm: limit.TokenBucket, Limit: 3, Window: time.Minute}
		}
		return fixed
	}
	h := func(key string, cost int64) limit.Hit { return limit.Hit{Key: key, Spec: specOf(key), Cost: cost} }
	refund := func(key string, cost int64) limit.Hit {
		return limit.Hit{Key: key, Spec: specOf(key), Cost: cost, Refund: true}
	}
	setup := []limit.Hit{h(a0, 1), h(a1, 3), h(b0, 1)}

	cases := []struct {
		name string
		call []limit.Hit
		full bool
		want []limit.Decision // when not full
		// Remaining of each key afterwards (3 means no counter).
		after map[string]int64
	}{
		{
			name:  "new key in a full shard: refused",
			call:  []limit.Hit{h(a2, 1)},
			full:  true,
			after: map[string]int64{a0: 2, a1: 0, a2: 3},
		},
		{
			name:  "held key and new key in the full shard: neither consumed",
			call:  []limit.Hit{h(a0, 1), h(a2, 1)},
			full:  true,
			after: map[string]int64{a0: 2, a2: 3},
		},
		{
			name:  "held key of another shard and a new key in the full shard: neither consumed",
			call:  []limit.Hit{h(b0, 2), h(b1, 1), h(a2, 1)},
			full:  true,
			after: map[string]int64{b0: 2, b1: 3, a2: 3},
		},
		{
			name:  "two new keys where one fits: refused",
			call:  []limit.Hit{h(b1, 1), h(b2, 1)},
			full:  true,
			after: map[string]int64{b0: 2, b1: 3, b2: 3},
		},
		{
			name:  "one new key where one fits: consumed",
			call:  []limit.Hit{h(b1, 1), h(b1, 1)},
			want:  []limit.Decision{allow(2, time.Minute), allow(1, time.Minute)},
			after: map[string]int64{b0: 2, b1: 1},
		},
		{
			name:  "a blocked call needs no room: decided",
			call:  []limit.Hit{h(a2, 1), h(a1, 1)},
			want:  []limit.Decision{allow(3, time.Minute), deny(0, time.Minute, time.Minute)},
			after: map[string]int64{a1: 0, a2: 3},
		},
		{
			name:  "a peek of a new key needs no room",
			call:  []limit.Hit{h(a2, 0), h(a3, 0)},
			want:  []limit.Decision{allow(3, time.Minute), allow(3, time.Minute)},
			after: map[string]int64{a2: 3, a3: 3},
		},
		{
			name:  "a refund that empties a counter makes room for a new one in the call",
			call:  []limit.Hit{refund(a0, 1), h(a2, 1)},
			want:  []limit.Decision{allow(3, 0), allow(2, time.Minute)},
			after: map[string]int64{a0: 3, a1: 0, a2: 2},
		},
		{
			name:  "a refund that leaves its counter makes no room",
			call:  []limit.Hit{refund(a1, 1), h(a2, 1)},
			full:  true,
			after: map[string]int64{a1: 0, a2: 3},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{MaxEntries: twoShards, Now: newClock(base).Now})
			fill(t, m, 0, shardSize-2)
			fill(t, m, 1, shardSize-2)
			for _, s := range setup {
				eval(t, m, s)
			}
			got, err := try(m, c.call...)
			switch {
			case c.full && !errors.Is(err, limit.ErrFull):
				t.Fatalf("got %+v, %v; want an error wrapping ErrFull", got, err)
			case !c.full && err != nil:
				t.Fatalf("Evaluate: %v", err)
			case !c.full:
				for i := range got {
					if got[i] != c.want[i] {
						t.Errorf("decision %d: got %+v, want %+v", i, got[i], c.want[i])
					}
				}
			}
			for key, rem := range c.after {
				if d := eval(t, m, h(key, 0))[0]; d.Remaining != rem {
					t.Errorf("after the call, %s has Remaining %d, want %d", key, d.Remaining, rem)
				}
			}
			wantRefused := int64(0)
			if c.full {
				wantRefused = 1
			}
			if r := m.Stats().Refused; r != wantRefused {
				t.Errorf("Stats().Refused = %d, want %d", r, wantRefused)
			}
		})
	}
}

// TestFullErrorNamesTheShard: the error says where and how full.
func TestFullErrorNamesTheShard(t *testing.T) {
	m := limit.NewMemory(limit.MemoryOptions{MaxEntries: twoShards + 1, Now: newClock(base).Now})
	fill(t, m, 1, shardSize)
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute}
	_, err := try(m, limit.Hit{Key: keysIn(t, m, 1, 1, "k")[0], Spec: spec, Cost: 1})
	want := "limit: memory store full: no room for a new counter in shard 1 of 2: its share of the 2049 max entries is 1024 counters, none expired"
	if !errors.Is(err, limit.ErrFull) || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestFullShardDropsExpiredFirst: expired counters make room, live ones
// are kept whatever their expiry.
func TestFullShardDropsExpiredFirst(t *testing.T) {
	clk := newClock(base)
	m := limit.NewMemory(limit.MemoryOptions{MaxEntries: twoShards, Now: clk.Now})
	fill(t, m, 0, shardSize-2)
	window := func(d time.Duration) limit.Spec {
		return limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: d}
	}
	keys := keysIn(t, m, 0, 3, "k")
	long, soon, late := keys[0], keys[1], keys[2]
	eval(t, m, limit.Hit{Key: long, Spec: window(30 * time.Second), Cost: 1})
	eval(t, m, limit.Hit{Key: soon, Spec: window(10 * time.Second), Cost: 1})
	clk.Add(10*time.Second - us)
	if _, err := try(m, limit.Hit{Key: late, Spec: window(20 * time.Second), Cost: 1}); !errors.Is(err, limit.ErrFull) {
		t.Fatalf("new key 1µs before a counter of its full shard expires: %v, want ErrFull", err)
	}
	if d := eval(t, m, limit.Hit{Key: soon, Spec: window(10 * time.Second)})[0]; d.Remaining != 4 {
		t.Fatalf("the soonest-expiring counter was forgotten: %+v", d)
	}
	clk.Add(us)
	eval(t, m, limit.Hit{Key: late, Spec: window(20 * time.Second), Cost: 1})
	for _, c := range []struct {
		key       string
		window    time.Duration
		remaining int64
	}{{long, 30 * time.Second, 4}, {soon, 10 * time.Second, 5}, {late, 20 * time.Second, 4}} {
		if d := eval(t, m, limit.Hit{Key: c.key, Spec: window(c.window)})[0]; d.Remaining != c.remaining {
			t.Errorf("%s (window %v): Remaining %d, want %d", c.key, c.window, d.Remaining, c.remaining)
		}
	}
	want := limit.MemoryStats{Entries: shardSize, Capacity: twoShards, Refused: 1, Expired: 1}
	if st := m.Stats(); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}

// TestRefusalLog: one warning at the first refusal, then at most one per
// RefusalLogInterval of the clock, counting the refusals since the last.
func TestRefusalLog(t *testing.T) {
	var buf testlog.Buffer
	clk := newClock(base)
	m := limit.NewMemory(limit.MemoryOptions{
		MaxEntries: 1,
		Now:        clk.Now,
		Logger:     slog.New(slog.NewTextHandler(&buf, nil)),
	})
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: 24 * time.Hour}
	eval(t, m, limit.Hit{Key: "held", Spec: spec, Cost: 1})
	if buf.String() != "" {
		t.Fatalf("logged without a refusal: %s", buf.String())
	}
	iv := limit.RefusalLogInterval
	steps := []struct {
		at      time.Duration
		refuse  int   // calls refused at that instant
		lines   int   // lines logged so far
		refused int64 // the last line's count
	}{
		{0, 1, 1, 1},
		{time.Second, 3, 1, 1},
		{iv - us, 2, 1, 1},
		{iv, 1, 2, 6},
		{iv + time.Second, 1, 2, 6},
		{5 * iv, 2, 3, 2}, // the one at iv + 1s, and this one's first
		{6 * iv, 1, 4, 2},
	}
	count := regexp.MustCompile(` refused=(\d+) `)
	n, lines := 0, 0
	for i, s := range steps {
		clk.Set(base.Add(s.at))
		before := n
		for range s.refuse {
			n++
			if _, err := try(m, limit.Hit{Key: fmt.Sprint("new-", n), Spec: spec, Cost: 1}); !errors.Is(err, limit.ErrFull) {
				t.Fatalf("step %d: %v, want ErrFull", i, err)
			}
		}
		got := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(got) != s.lines {
			t.Fatalf("step %d (at %v): %d lines, want %d:\n%s", i, s.at, len(got), s.lines, buf.String())
		}
		last := got[len(got)-1]
		if c := count.FindStringSubmatch(last); c == nil || c[1] != strconv.FormatInt(s.refused, 10) {
			t.Fatalf("step %d: last line %q, want refused=%d", i, last, s.refused)
		}
		if s.lines > lines {
			// Logged at the step's first refusal.
			for _, want := range []string{"level=WARN", "in-memory store full", fmt.Sprint(" refused_total=", before+1, " "), " max_entries=1"} {
				if !strings.Contains(last, want) {
					t.Fatalf("step %d: line %q lacks %q", i, last, want)
				}
			}
		}
		lines = s.lines
	}
}

// TestFullConcurrent floods a full store from several goroutines while
// others hit a blocked user and a held counter: the user is never
// admitted, the held counter never forgotten, and Stats counts every
// refusal returned. Run with -race.
func TestFullConcurrent(t *testing.T) {
	const maxEntries, perWorker, workers = 4096, 2000, 4
	clk := newClock(base)
	m := limit.NewMemory(limit.MemoryOptions{MaxEntries: maxEntries, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(new(testlog.Buffer), nil))})
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour}
	user := limit.Hit{Key: "user", Spec: spec, Cost: 1}
	for range 10 {
		eval(t, m, user)
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				_, err := try(m, limit.Hit{Key: fmt.Sprint("flood-", w, "-", i), Spec: spec, Cost: 1})
				switch {
				case errors.Is(err, limit.ErrFull):
					refused.Add(1)
				case err != nil:
					t.Error(err)
					return
				}
				if i%100 == 0 {
					clk.Add(us)
					_ = m.Stats()
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range perWorker / 10 {
				d, err := try(m, user)
				if err != nil || d[0].Allowed {
					t.Errorf("blocked user: %+v, %v", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := m.Stats()
	if st.Refused != refused.Load() || st.Refused == 0 || st.Entries > maxEntries {
		t.Fatalf("Stats = %+v; %d refusals returned, MaxEntries %d", st, refused.Load(), maxEntries)
	}
}
