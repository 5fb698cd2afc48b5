package rlqs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unique"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// How a bucket_id meets the rules.
//
// A bucket_id is a map: its entries have no order, while a rule is a path
// of keys, one per level. The bucket's entries, sorted by key, are tried
// first; when no rule matches them in that order and there are at most
// maxPermuted entries, every other order is tried, in lexicographic order
// of the keys, and the first that a rule matches decides. A rule may thus
// nest a bucket's keys in any order. The chosen order is the descriptor:
// its counter keys are those an RLS request with the same entries in that
// order counts on, so both protocols share the limit. A bucket no rule
// matches, or whose rule has no counted limit, is assigned allow-all, as
// an RLS descriptor without a limit is answered OK.

// maxPermuted is the most entries of a bucket_id whose every order is
// tried (24 orders of 4 entries, each a lookup that does not allocate,
// once per bucket and rule set); a larger bucket is matched in key order
// only.
const maxPermuted = 4

// bucket is one bucket of a stream: what identifies it, what the rules
// make of it, its usage and its assignment.
type bucket struct {
	// key is the canonical form of the bucket_id (bucketKey), entries its
	// entries sorted by key, and size the bytes of its keys and values.
	key     string
	entries []rules.Entry
	size    int
	// id is the bucket_id of the report that carried the bucket in the
	// current round, which its action repeats; nil otherwise.
	id *rlqspb.BucketId

	// set is the rule set the fields below were resolved with.
	set *rules.Set
	// counters are the bucket's counted limits; none means allow-all.
	counters []counter
	// shadow: the rule is in shadow mode; counted, never denied.
	shadow bool
	// failure is the rule's failure mode.
	failure rules.FailureMode
	// demandKey is the counter of the fleet's demand for counters[0]; set
	// when there are counters.
	demandKey unique.Handle[string]

	// pending is the allowed requests reported and not yet charged (kept
	// over a failed store call); fresh the demand of the current round.
	pending, fresh int64
	// recent are the stream's latest reports of the bucket, newest first:
	// enough to cover the current demand slot and the one before, at
	// Envoy's pace and a few reports more.
	recent [6]sample
	// since is when the report whose usage was charged last came (zero
	// before the first).
	since time.Time
	// fleet and fleetBefore are the fleet's demand in the current slot and
	// in the slot before, as the store returned them in the last round.
	fleet, fleetBefore int64
	// active is when the bucket last had demand, or was created.
	active time.Time
	// round is the number of the last round the bucket took part in.
	round uint64
	// failed: the last round's store call for the bucket failed.
	failed bool
	// reported: the current round's report carried the bucket.
	reported bool
	// abandoned: the bucket was removed for idleness.
	abandoned bool

	// sent is the assignment Envoy holds, since sentAt; assigned is false
	// before the first.
	sent     strategy
	sentAt   time.Time
	assigned bool
	// wakeAt, when not zero, is when the window that decided the
	// assignment ends: it is computed again then.
	wakeAt time.Time
}

// sample is one report of a bucket's demand: the demand slot of the
// round that charged it (0, the first interval of 1970, for none) and
// its demand.
type sample struct {
	slot, demand int64
}

// note adds a report's counts to the bucket, saturating: what Envoy
// admitted is charged at the next round, the demand recorded.
func (b *bucket) note(now time.Time, allowed, denied uint64) {
	a, d := clampCount(allowed), clampCount(denied)
	b.pending = min(b.pending+a, maxCount)
	b.fresh = min(b.fresh+a+d, maxCount)
	b.reported = true
	if a+d > 0 {
		b.active = now
	}
}

// uncounted ends a round of a bucket that no limit counts: what it
// admitted is charged nowhere, so it is dropped rather than charged to a
// limit a later rule set gives the bucket (a new limit would start
// spent), and a store failure of a round when it had one no longer
// decides its assignment.
func (b *bucket) uncounted(now time.Time) {
	b.pending, b.failed = 0, false
	if b.reported {
		b.since = now
	}
}

// record ends the bucket's part in a round at now: the demand of the
// report that carried it, if one did, joins the recent samples.
func (b *bucket) record(now time.Time, interval time.Duration) {
	if !b.reported {
		return
	}
	b.reported = false
	copy(b.recent[1:], b.recent[:len(b.recent)-1])
	b.recent[0] = sample{slot: slotOf(now, interval), demand: b.fresh}
	b.fresh = 0
}

// demand returns the stream's demand and the fleet's that its share is
// taken from at now: those of the slot before the current one, complete
// since every stream reported once in it, whatever the phase of their
// reports. Until that slot holds the fleet's demand (a bucket's first
// interval anywhere), or while the stream has not reported in it (a new
// stream: an Envoy that reconnected, whose old stream's demand that slot
// holds, or one joining the fleet), those of the current slot so far:
// the first stream to report then has the fleet's demand to itself, and
// a reconnected Envoy keeps its pace rather than getting 1/(fleet+1)
// for an interval.
func (b *bucket) demand(now time.Time, interval time.Duration) (own, fleet int64) {
	slot := slotOf(now, interval)
	if b.fleetBefore == 0 || b.newIn(slot) {
		return b.ownIn(slot), b.fleet
	}
	return b.ownIn(slot - 1), b.fleetBefore
}

// newIn reports whether every report the stream made of the bucket came
// in slot.
func (b *bucket) newIn(slot int64) bool {
	for _, s := range b.recent {
		if s.slot != 0 && s.slot < slot {
			return false
		}
	}
	return true
}

// ownIn returns the demand of the stream's reports in slot, as they were
// added to the slot's counter (at the instant of the round that charged
// them).
func (b *bucket) ownIn(slot int64) int64 {
	var n int64
	for _, s := range b.recent {
		if s.slot == slot {
			n += s.demand
		}
	}
	return n
}

// maxCount bounds the counts a report may add to a bucket: far above any
// limit (limits are uint32), and exact in the Lua scripts' doubles.
const maxCount = 1 << 53

func clampCount(n uint64) int64 {
	if n > maxCount {
		return maxCount
	}
	return int64(n)
}

// bucketID reads a bucket_id within the bounds: its entries sorted by key,
// its canonical key (bucketKey) and its size, or an error saying which
// bound it breaks.
func bucketID(id *rlqspb.BucketId, maxEntries, maxBytes int) (key string, entries []rules.Entry, size int, err error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", nil, 0, fmt.Errorf("empty bucket_id (a bucket_matchers action without bucket_id_builder): it cannot be assigned")
	case len(m) > maxEntries:
		return "", nil, 0, fmt.Errorf("bucket_id of %d entries, more than the bound of %d", len(m), maxEntries)
	}
	entries = make([]rules.Entry, 0, len(m))
	for k, v := range m {
		if k == "" {
			return "", nil, 0, fmt.Errorf("bucket_id with an empty key")
		}
		size += len(k) + len(v)
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	if size > maxBytes {
		return "", nil, 0, fmt.Errorf("bucket_id of %d bytes, more than the bound of %d", size, maxBytes)
	}
	slices.SortFunc(entries, func(a, b rules.Entry) int { return strings.Compare(a.Key, b.Key) })
	return bucketKey(entries), entries, size, nil
}

// bucketKey writes sorted entries as each key and value's length, ':' and
// bytes: injective, so two bucket_ids share a key only when equal.
func bucketKey(entries []rules.Entry) string {
	n := 0
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 8
	}
	b := make([]byte, 0, n)
	for _, e := range entries {
		for _, s := range [2]string{e.Key, e.Value} {
			b = strconv.AppendInt(b, int64(len(s)), 10)
			b = append(b, ':')
			b = append(b, s...)
		}
	}
	return string(b)
}

// actionID returns the bucket_id of the bucket's action: the report's
// when one carried it this round, else one built from its entries.
// Envoys report thousands of buckets a second each: building a map for
// each action was a tenth of floodgate's CPU, and keeping one per bucket
// a seventh of its memory.
func (b *bucket) actionID() *rlqspb.BucketId {
	if b.id != nil {
		return b.id
	}
	return bucketMap(b.entries)
}

// bucketMap returns the entries as a bucket_id's map, for the actions.
func bucketMap(entries []rules.Entry) *rlqspb.BucketId {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		m[e.Key] = e.Value
	}
	return &rlqspb.BucketId{Bucket: m}
}

// orderFor returns sorted (entries sorted by key) when a rule of domain
// matches it, else the first other order, in lexicographic order of the
// keys, that a rule matches, trying them only for at most maxPermuted
// entries; sorted when none matches.
func orderFor(set *rules.Set, domain string, sorted []rules.Entry) []rules.Entry {
	n := len(sorted)
	if set.Match(domain, sorted) != nil || n < 2 || n > maxPermuted {
		return sorted
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	perm := make([]rules.Entry, n)
	for nextPermutation(idx) {
		for i, j := range idx {
			perm[i] = sorted[j]
		}
		if set.Match(domain, perm) != nil {
			return perm
		}
	}
	return sorted
}

// nextPermutation advances idx to the next permutation in lexicographic
// order and reports whether there was one.
func nextPermutation(idx []int) bool {
	i := len(idx) - 2
	for i >= 0 && idx[i] >= idx[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(idx) - 1
	for idx[j] <= idx[i] {
		j--
	}
	idx[i], idx[j] = idx[j], idx[i]
	slices.Reverse(idx[i+1:])
	return true
}

// resolver turns buckets into counters with the rules of one stream's
// domain, reusing its Resolutions.
type resolver struct {
	domain       string
	demandWindow time.Duration
	failure      rules.FailureMode
	res          rules.Resolution
}

// resolve sets b's counters, mode and demand key from set (nil: no rules,
// allow-all).
func (r *resolver) resolve(b *bucket, set *rules.Set) {
	b.set, b.counters, b.shadow, b.failure = set, b.counters[:0], false, r.failure
	if set == nil || !set.HasDomain(r.domain) {
		return
	}
	order := orderFor(set, r.domain, b.entries)
	// Without an override, Resolve cannot fail.
	if err := set.Resolve(&r.res, r.domain, []rules.Descriptor{{Entries: order}}); err != nil {
		return
	}
	d := &r.res.Descriptors[0]
	if d.Rule != nil {
		b.shadow = d.Mode == limit.Advisory
		if d.Rule.FailureMode != rules.FailureDefault {
			b.failure = d.Rule.FailureMode
		}
	}
	for _, l := range d.Limits {
		if l.Counted() {
			b.counters = append(b.counters, counter{key: unique.Make(l.Key), spec: l.Limit.Spec})
		}
	}
	r.res.Reset()
	if len(b.counters) > 0 {
		b.demandKey = unique.Make(r.demandKey(set, b.counters[0].key.Value()))
	}
}

// demandKey returns the key of the counter of the fleet's demand for the
// counter at counterKey (see rules.DemandKey).
func (r *resolver) demandKey(set *rules.Set, counterKey string) string {
	return rules.DemandKey(counterKey, r.demandWindow)
}
