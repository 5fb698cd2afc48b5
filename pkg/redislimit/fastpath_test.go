package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

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
	const general = "floodgate_general_path"
	src := redislimit.LibrarySource()
	src = strings.Replace(src, "#!lua name="+redislimit.FunctionName(), "#!lua name="+general, 1)
	src = strings.Replace(src, "'"+redislimit.FunctionName()+"'", "'"+general+"'", 1)
	off := strings.Replace(src, "local function fixed_takes(h, cost, flags)\n", "local function fixed_takes(h, cost, flags) do return false end\n", 1)
	if off == src {
		t.Fatal("the fast path's switch is not where this test expects it in evaluate.lua")
	}
	if err := n.client.FunctionLoad(ctx, redislimit.LibrarySource()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.client.FunctionLoad(ctx, off).Err(); err != nil {
		t.Fatal(err)
	}
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
			nh := 1 + rng.IntN(3)
			args = append(args, fmt.Sprint(now), nh)
			for range nh {
				c := rng.IntN(counters)
				keys = append(keys, fmt.Sprint("c", c))
				cost, flags := []int64{0, 1, 1, 1, 2}[rng.IntN(5)], 0
				code := int64(limit.FixedWindow)
				switch rng.IntN(40) {
				case 0:
					flags = 1 // a refund
				case 1:
					flags = 2 // advisory
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
			v := []string{"junk", "7", "-3"}[rng.IntN(3)]
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
			Calendar: limit.Calendar{Unit: limit.CalendarDay}}, 1 << 39, 1 << 39},
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
