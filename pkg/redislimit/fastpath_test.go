package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// TestFixedFastPath holds evaluate.lua's fast path for plain fixed windows
// to the general path it stands in for: the same random calls go to the
// library and to a copy of it whose fast path is switched off, each on its
// own keys, and after every call both must have given the same reply and
// left every key with the same value and the same expiry instant
// (PEXPIRETIME, to the ms). The calls mix what the fast path takes (plain
// hits on distinct keys, looks of cost 0, counts over a lowered limit, old
// windows, missing keys, requests blocked by a later hit, whose earlier
// hits it takes back) with what it must leave to the general path (a
// repeated key, flags, a cost above the capacity, another algorithm, a key
// in the string or hash layouts of earlier releases, a key holding
// something else).
// TestMatchesMemory and TestGolden hold both paths to package limit; this
// test pins what they do not see: the keys' values and expiries.
func TestFixedFastPath(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	general := loadBothPaths(t, n)
	spec := func(code, lim, window int64) string {
		return fmt.Sprintf("%d:%d:%d:%d:1", code, lim, window, lim)
	}
	rng := rand.New(rand.NewPCG(29, 2))
	now := future.UnixMicro() + rng.Int64N(time.Hour.Microseconds())
	const counters = 6
	limits := []int64{3, 3, 5, 1, 1000, 2}
	windows := []int64{1_000_000, 1_000_000, 60_000_000, 250_000, 3_600_000_000, 1_000_000}
	calls := 0
	for step := range 1500 {
		now += rng.Int64N(400_000)
		if rng.IntN(50) == 0 {
			limits[rng.IntN(counters)] = 1 + rng.Int64N(4) // a reload
		}
		var keys, fastKeys, genKeys []string
		var args []any
		for range 1 + rng.IntN(3) {
			// Four or five hits take a reply of no preset size.
			nh := []int{1, 1, 2, 2, 3, 3, 4, 5}[rng.IntN(8)]
			args = append(args, fmt.Sprint(now), nh)
			// A quarter of the requests report usage (flag 8): charges,
			// kept past the limit.
			usage := rng.IntN(4) == 0
			for range nh {
				c := rng.IntN(counters)
				keys = append(keys, fmt.Sprint("c", c))
				cost, flags := []int64{0, 1, 1, 1, 2}[rng.IntN(5)], 0
				if usage {
					cost, flags = []int64{0, 1, 2, 3, limits[c]}[rng.IntN(5)], 8
				}
				code := int64(limit.FixedWindow)
				switch rng.IntN(40) {
				case 0:
					flags += 1 // a refund
				case 1:
					flags += 2 // advisory
				case 2:
					cost = limits[c] + 1
				case 3:
					code = int64(limit.TokenBucket)
				}
				args = append(args, spec(code, limits[c], windows[c]), cost, flags)
			}
		}
		for _, k := range keys {
			fastKeys = append(fastKeys, "fast:"+k)
			genKeys = append(genKeys, "gen:"+k)
		}
		switch rng.IntN(120) {
		case 0: // a counter in the hash layout of earlier releases
			k := keys[0]
			w := windows[k[1]-'0']
			at := time.Now().Add(time.Minute)
			for _, p := range []string{"fast:", "gen:"} {
				n.client.Del(ctx, p+k)
				n.client.HSet(ctx, p+k, "s", now/w*w, "n", 1)
				n.client.PExpireAt(ctx, p+k, at)
			}
		case 1: // this window's count, its start written otherwise than %d
			k := keys[0]
			w := windows[k[1]-'0']
			for _, p := range []string{"fast:", "gen:"} {
				n.client.Set(ctx, p+k, fmt.Sprintf("0%d:1", now/w*w), 0)
				n.client.PExpireAt(ctx, p+k, time.UnixMilli(now/1000+w/1000))
			}
		case 2: // a key holding something else
			at := time.Now().Add(time.Minute)
			w := windows[keys[0][1]-'0']
			// This window's counter, written as INCRBY does not read it.
			this := windowCounter(now, w, 1)
			v := []string{"junk", "7", "-3", fmt.Sprintf("%d.0", this), fmt.Sprintf(" %d", this), fmt.Sprintf("0x%x", this)}[rng.IntN(6)]
			for _, p := range []string{"fast:", "gen:"} {
				n.client.Set(ctx, p+keys[0], v, 0)
				n.client.PExpireAt(ctx, p+keys[0], at)
			}
		case 3: // this window's count in the string layout of earlier releases
			k := keys[0]
			w := windows[k[1]-'0']
			v := fmt.Sprintf("%d:%d", now/w*w, rng.IntN(3))
			for _, p := range []string{"fast:", "gen:"} {
				n.client.Set(ctx, p+k, v, 0)
				n.client.PExpireAt(ctx, p+k, time.UnixMilli(now/1000+w/1000))
			}
		}
		fast, fastErr := n.client.FCall(ctx, redislimit.FunctionName(), fastKeys, args...).Result()
		gen, genErr := n.client.FCall(ctx, general, genKeys, args...).Result()
		calls++
		// Errors name the key, whose prefix differs.
		same := func(fast, gen any) bool {
			return strings.ReplaceAll(fmt.Sprint(fast), "fast:", "") == strings.ReplaceAll(fmt.Sprint(gen), "gen:", "")
		}
		if !same(fastErr, genErr) || !same(fast, gen) {
			t.Fatalf("step %d: keys %v args %v:\nfast path %v %v\ngeneral   %v %v", step, keys, args, fast, fastErr, gen, genErr)
		}
		for c := range counters {
			k := fmt.Sprint("c", c)
			same := func(fast, gen any) bool {
				return strings.ReplaceAll(fmt.Sprint(fast), "fast:", "") == strings.ReplaceAll(fmt.Sprint(gen), "gen:", "")
			}
			fv, fe := n.client.Do(ctx, "DUMP", "fast:"+k).Result()
			gv, ge := n.client.Do(ctx, "DUMP", "gen:"+k).Result()
			fx := n.client.PExpireTime(ctx, "fast:"+k).Val()
			gx := n.client.PExpireTime(ctx, "gen:"+k).Val()
			if !same(fe, ge) || !reflect.DeepEqual(fv, gv) || fx != gx {
				t.Fatalf("step %d: key %s: fast path left %q (%v) expiring %v, general %q (%v) expiring %v",
					step, k, fv, fe, fx, gv, ge, gx)
			}
		}
	}
	// The fast path took calls: each adds to counters with INCRBY, the
	// general path never does.
	stats := n.client.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_incrby:") {
		t.Fatalf("no INCRBY in %d calls: the fast path decided none", calls)
	}
	t.Logf("%d calls, keys alike after each", calls)
}

// TestRefusedSetWritesNothing: a request whose new window's counter Redis
// refuses to SET (the user's ACL denies it) gets the refusal as its own
// error, in the reply, and leaves every key as it was, on the fast path as
// on the general path: the fast path takes back what its INCRBYs applied
// and its commits wrote, the hits before and after the refused one alike.
// A count INCRBY created and left would hold the key without expiry, which
// no later call reads as a counter; one added to a held window would be
// consumed by a request that failed. Once a request of the call is
// blocked, the fast path reads before it writes and adds to a held
// counter in its commit, before the refused one.
func TestRefusedSetWritesNothing(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	general := loadBothPaths(t, n)
	if _, err := n.srv.Do("ACL", "SETUSER", "noset", "reset", "on", ">pw", "~*", "+@all", "-set"); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: n.srv.Addr, Username: "noset", Password: "pw"})
	t.Cleanup(func() { client.Close() })
	w := time.Hour.Microseconds()
	spec := fmt.Sprintf("%d:3:%d:3:1", limit.FixedWindow, w)
	now := future.UnixMicro()
	// What a key holds before the request: nothing, this window's counter
	// (which the request adds to) or an earlier window's (which it
	// replaces); "full" is at the limit.
	held := map[string]int64{"held": windowCounter(now, w, 1), "stale": windowCounter(now-w, w, 2), "full": windowCounter(now, w, 3)}
	for _, tc := range []struct {
		keys    []string
		blocked bool // a blocked request on "full" comes first in the call
	}{
		{[]string{"new"}, false},
		{[]string{"stale"}, false},
		{[]string{"new", "new2"}, false},
		{[]string{"held", "new"}, false},
		{[]string{"new", "held"}, false},
		{[]string{"held", "stale", "new"}, false},
		{[]string{"held", "new"}, true},
	} {
		name := fmt.Sprintf("%s/blocked=%t", strings.Join(tc.keys, ","), tc.blocked)
		t.Run(name, func(t *testing.T) {
			keys, args := tc.keys, []any{}
			if tc.blocked {
				keys = append([]string{"full"}, keys...)
				args = append(args, fmt.Sprint(now), 1, spec, 1, 0)
			}
			args = append(args, fmt.Sprint(now), len(tc.keys))
			for range tc.keys {
				args = append(args, spec, 1, 0)
			}
			var replies [2]string
			for i, lib := range []string{redislimit.FunctionName(), general} {
				prefix := fmt.Sprintf("%d:%s:", i, name)
				prefixed := make([]string, len(keys))
				before := make(map[string]string)
				for j, k := range keys {
					prefixed[j] = prefix + k
					if v, ok := held[k]; ok {
						if err := n.client.Set(ctx, prefixed[j], v, time.Hour).Err(); err != nil {
							t.Fatal(err)
						}
					}
					before[prefixed[j]] = keyState(ctx, t, n.client, prefixed[j])
				}
				r, err := client.FCall(ctx, lib, prefixed, args...).Result()
				if err != nil {
					t.Fatalf("%s: call error %v, want the request's error in the reply", lib, err)
				}
				replies[i] = strings.ReplaceAll(fmt.Sprint(r), prefix, "")
				for k, was := range before {
					if after := keyState(ctx, t, n.client, k); after != was {
						t.Errorf("%s: key %s holds %s, held %s before the call", lib, k, after, was)
					}
				}
			}
			if replies[0] != replies[1] || !strings.Contains(replies[0], "can't run this command") {
				t.Fatalf("replies %v and %v (general path), want the same refused SET", replies[0], replies[1])
			}
		})
	}
}

// keyState is key's value and expiry instant (PEXPIRETIME, ms), or that
// it is missing.
func keyState(ctx context.Context, t *testing.T, client *redis.Client, key string) string {
	t.Helper()
	v, err := client.Get(ctx, key).Result()
	if err == redis.Nil {
		return "nothing"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%q expiring at %d ms", v, client.PExpireTime(ctx, key).Val().Milliseconds())
}

// windowCounter is a plain fixed window's counter as the script stores it
// (common.lua, window_tag): the tag of the window of w µs holding now,
// times 2^33, plus count.
func windowCounter(now, w, count int64) int64 {
	return (now/w%(1<<19-1)+1)<<33 + count
}

// loadBothPaths loads the library and a copy of it named by the result
// whose fast path is switched off, so that it decides everything on the
// general path.
func loadBothPaths(t *testing.T, n *node) string {
	t.Helper()
	ctx := context.Background()
	const general = "floodgate_general_path"
	src := redislimit.LibrarySource()
	src = strings.Replace(src, "#!lua name="+redislimit.FunctionName(), "#!lua name="+general, 1)
	src = strings.Replace(src, "'"+redislimit.FunctionName()+"'", "'"+general+"'", 1)
	// Replaced on its own line, so that errors name the same lines in both.
	off := strings.Replace(src, "local function fixed_takes(h, cost, flags)\n", "local function fixed_takes(h, cost, flags) do return false end\n", 1)
	if off == src {
		t.Fatal("the fast path's switch is not where this test expects it in evaluate.lua")
	}
	for _, lib := range []string{redislimit.LibrarySource(), off} {
		if err := n.client.FunctionLoad(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return general
}

// TestBareZeroIsNoCounter: INCRBY cannot tell a key holding the bare 0
// from a missing one, so the fast path's INCRBY takes it for none; the
// fast path's read (GET, once a request of the call is blocked) and the
// general path read it so too, so that which command reads it changes no
// decision, and an allowed hit makes it this window's counter.
func TestBareZeroIsNoCounter(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	general := loadBothPaths(t, n)
	spec := fmt.Sprintf("%d:3:%d:3:1", limit.FixedWindow, time.Hour.Microseconds())
	now := future.UnixMicro()
	for _, tc := range []struct {
		name    string
		blocked bool // a blocked request comes first in the call
	}{{"read by INCRBY", false}, {"read by GET", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var reply [2]any
			var dump [2]any
			for i, lib := range []string{redislimit.FunctionName(), general} {
				p := fmt.Sprintf("zero:%d:%t:", i, tc.blocked)
				n.client.Set(ctx, p+"zero", "0", 0)
				var keys []string
				var args []any
				if tc.blocked {
					keys = append(keys, p+"full", p+"full")
					args = append(args, now, 1, spec, 3, 0, now, 1, spec, 1, 0)
				}
				keys = append(keys, p+"zero")
				args = append(args, now, 1, spec, 1, 0)
				r, err := n.client.FCall(ctx, lib, keys, args...).Slice()
				if err != nil {
					t.Fatalf("%s: %v", lib, err)
				}
				reply[i] = r[len(r)-1]
				dump[i] = n.client.Get(ctx, p+"zero").Val()
			}
			if want := []any{int64(1), int64(2)}; fmt.Sprint(reply[0].([]any)[:2]) != fmt.Sprint(want) {
				t.Errorf("fast path: %v, want an allowed hit with 2 remaining, as on a missing key", reply[0])
			}
			if fmt.Sprint(reply[0]) != fmt.Sprint(reply[1]) || dump[0] != dump[1] {
				t.Errorf("fast path %v leaving %v, general path %v leaving %v", reply[0], dump[0], reply[1], dump[1])
			}
			if dump[0] == "0" {
				t.Error("the allowed hit left the bare 0")
			}
		})
	}
}

// TestLooseCounterForms: a key holding this window's counter in a form
// tonumber reads and INCRBY refuses ("<n>.0", hex, a space) is decided as
// that counter and rewritten in the decimal form, on either path and by
// either command of the fast path: also when it reads first (after a
// blocked request in the call), where it once held the key as a counter,
// wrote the request's other hit, then failed to add to it.
func TestLooseCounterForms(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	general := loadBothPaths(t, n)
	w := time.Hour.Microseconds()
	spec := fmt.Sprintf("%d:3:%d:3:1", limit.FixedWindow, w)
	now := future.UnixMicro()
	this := windowCounter(now, w, 1)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, v := range []string{fmt.Sprintf("%d.0", this), fmt.Sprintf(" %d", this), fmt.Sprintf("0x%x", this)} {
		// blocked: a blocked request comes first in the call; alone: the
		// key's hit is a request of its own, after one on the new key.
		for _, c := range []struct{ blocked, alone bool }{{false, false}, {true, false}, {true, true}} {
			var got [2]string
			for i, lib := range []string{redislimit.FunctionName(), general} {
				p := fmt.Sprintf("loose:%q:%v:%d:", v, c, i)
				n.client.Set(ctx, p+"odd", v, 0)
				n.client.PExpireAt(ctx, p+"odd", at)
				var keys []string
				var args []any
				if c.blocked {
					keys = append(keys, p+"full", p+"full")
					args = append(args, now, 1, spec, 3, 0, now, 1, spec, 1, 0)
				}
				keys = append(keys, p+"new", p+"odd")
				if c.alone {
					args = append(args, now, 1, spec, 1, 0, now, 1, spec, 1, 0)
				} else {
					args = append(args, now, 2, spec, 1, 0, spec, 1, 0)
				}
				r, err := n.client.FCall(ctx, lib, keys, args...).Slice()
				if err != nil {
					t.Fatalf("%s %q: %v", lib, v, err)
				}
				got[i] = fmt.Sprint(r[len(r)-1], " ", n.client.Get(ctx, p+"new").Val(), " ", n.client.Get(ctx, p+"odd").Val(),
					" ", n.client.PExpireTime(ctx, p+"new").Val(), " ", n.client.PExpireTime(ctx, p+"odd").Val())
			}
			if got[0] != got[1] {
				t.Errorf("%q, %+v:\nfast path %s\ngeneral   %s", v, c, got[0], got[1])
			}
			want := fmt.Sprintf("[1 2 %d 0 0 0 1 1 %d 0 0 0 0]", w-now%w, w-now%w)
			if c.alone {
				want = fmt.Sprintf("[1 1 %d 0 0 0 0]", w-now%w)
			}
			if !strings.HasPrefix(got[0], want) ||
				!strings.Contains(got[0], fmt.Sprint(" ", this+1, " ")) {
				t.Errorf("%q, %+v: %s, want the reply %s and the counter rewritten as %d", v, c, got[0], want, this+1)
			}
		}
	}
}

// TestFixedLimitBound: a plain fixed window's counter packs its count
// below 2^33 (evaluate.lua's fast path adds to it in place), which holds
// for every limit the rules accept, up to 2^32 − 1: the largest counts
// exactly, a cost of the whole limit included, and a larger limit is
// refused with an error naming it rather than miscounted. A calendar
// window's counter is a string, with no such bound.
func TestFixedLimitBound(t *testing.T) {
	n := startNode(t)
	l := newLimiter(t, n.client, newClock(future), "bound:")
	const most = 1<<32 - 1
	fixed := func(lim int64) limit.Spec {
		return limit.Spec{Algorithm: limit.FixedWindow, Limit: lim, Window: time.Hour}
	}
	for _, tc := range []struct {
		name string
		spec limit.Spec
		cost int64
		want int64 // remaining after a hit of cost
	}{
		{"the largest limit, a hit of 1", fixed(most), 1, most - 1},
		{"the largest limit, a hit of all of it", fixed(most), most, 0},
		{"a calendar day above it", limit.Spec{Algorithm: limit.FixedWindow, Limit: 1 << 40, Window: 24 * time.Hour,
			Calendar: time.UTC}, 1 << 39, 1 << 39},
	} {
		d := decide(t, l, limit.Hit{Key: tc.name, Spec: tc.spec, Cost: tc.cost})[0]
		if !d.Allowed || d.Remaining != tc.want {
			t.Errorf("%s: %+v, want allowed with %d remaining", tc.name, d, tc.want)
		}
	}
	_, err := l.Evaluate(context.Background(), []limit.Hit{{Key: "over", Spec: fixed(most + 1), Cost: 1}}, make([]limit.Decision, 1))
	if want := "fixed window limit 4294967296 above 4294967295"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("limit 2^32: err %v, want one containing %q", err, want)
	}
}

// TestChargeCappedAtMaxCount: a charge (a usage hit) counts past the limit
// up to limit.MaxCount, and one that would take a plain
// window's counter further is counted only up to it. The fast path adds a
// charge's whole cost with INCRBY, so it must hand such a charge to the
// general path, which caps it, having taken its own addition back: in a
// request of one hit and of several, both paths give the same replies and
// leave the same counters, which end at MaxCount.
func TestChargeCappedAtMaxCount(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	general := loadBothPaths(t, n)
	const most = 1<<32 - 1
	w := time.Hour.Microseconds()
	spec := fmt.Sprintf("%d:%d:%d:%d:1", limit.FixedWindow, most, w, most)
	now := future.UnixMicro()
	for _, keys := range [][]string{{"one"}, {"two", "three"}} {
		var got [2]string
		for i, lib := range []string{redislimit.FunctionName(), general} {
			p := fmt.Sprintf("cap:%d:", i)
			var prefixed []string
			args := []any{now, len(keys)}
			for _, k := range keys {
				prefixed = append(prefixed, p+k)
				args = append(args, spec, most, 8) // flagUsage
			}
			var replies []any
			for range 3 {
				r, err := n.client.FCall(ctx, lib, prefixed, args...).Slice()
				if err != nil {
					t.Fatalf("%s: %v", lib, err)
				}
				replies = append(replies, r)
			}
			var values []string
			for _, k := range prefixed {
				values = append(values, keyState(ctx, t, n.client, k))
			}
			got[i] = fmt.Sprint(replies, values)
		}
		if got[0] != got[1] {
			t.Errorf("%v:\nfast path %s\ngeneral   %s", keys, got[0], got[1])
		}
		debt := fmt.Sprint(limit.MaxCount - most)
		if !strings.Contains(got[0], " "+debt+" 1]") {
			t.Errorf("%v: %s, want the last charge denied with a debt of %s (MaxCount - limit)", keys, got[0], debt)
		}
	}
}
