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

// A bucket_id is a map, while a rule is a path of keys. Its entries are
// matched sorted by key, then, when no rule matches, in every other order
// (lexicographic), for at most maxPermuted entries. The order a rule
// matches is the descriptor whose counters an RLS request with those
// entries counts on. A bucket without a counted limit is allow-all, as
// RLS answers OK to a descriptor without a limit.
const maxPermuted = 4

// bucket is one bucket of a stream.
type bucket struct {
	key     string        // bucketKey of the bucket_id
	entries []rules.Entry // sorted by key
	// id is the bucket_id the current round's report carried, repeated in
	// the action; nil otherwise.
	id *rlqspb.BucketId

	// What stream.resolve made of it with set: no counters is allow-all;
	// demandKey counts the fleet's demand for counters[0].
	set       *rules.Set
	counters  []counter
	shadow    bool
	failure   rules.FailureMode
	demandKey unique.Handle[string]

	// pending is the allowed requests not yet charged (kept over a failed
	// store call), fresh the demand of the current round.
	pending, fresh int64
	// recent are the latest reports, newest first: enough for the current
	// demand slot and the one before, with a few to spare.
	recent [6]sample
	since  time.Time // when the report charged last came
	// fleet and fleetBefore are the fleet's demand in the current slot and
	// the one before, as the last round read them.
	fleet, fleetBefore int64
	active             time.Time // last demand, or creation
	round              uint64    // the last round the bucket was in
	failed             bool      // the last round's store call failed
	abandoned          bool      // removed for idleness

	// sent is the assignment Envoy holds, since sentAt; zero before the
	// first.
	sent   strategy
	sentAt time.Time
	wakeAt time.Time // when not zero, the end of the window that decided it
}

func (b *bucket) assigned() bool { return b.sent.kind != 0 }

// sample is one report's demand and the demand slot of the round that
// charged it (0 for none).
type sample struct {
	slot, demand int64
}

// note adds a report's counts to the bucket, saturating.
func (b *bucket) note(now time.Time, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	a, d := clampCount(u.GetNumRequestsAllowed()), clampCount(u.GetNumRequestsDenied())
	b.pending = min(b.pending+a, maxCount)
	b.fresh = min(b.fresh+a+d, maxCount)
	b.id = u.GetBucketId()
	if a+d > 0 {
		b.active = now
	}
}

// settle ends a round in which the bucket's usage was charged, or dropped
// when no limit counts it (not charged to a limit a later rule set gives
// it). A round the timer ran charged up to the last report, not up to now.
func (b *bucket) settle(now time.Time) {
	b.pending, b.failed = 0, false
	if b.id != nil {
		b.since = now
	}
}

// record ends the bucket's round: the demand of the report that carried
// it, if any, joins the recent samples.
func (b *bucket) record(now time.Time, interval time.Duration) {
	if b.id == nil {
		return
	}
	copy(b.recent[1:], b.recent[:len(b.recent)-1])
	b.recent[0] = sample{slot: slotOf(now, interval), demand: b.fresh}
	b.fresh = 0
}

// demand returns the stream's demand and the fleet's that its share is
// taken from: those of the slot before the current one, in which every
// stream has reported once whatever its phase. Until that slot holds the
// fleet's demand, or while this stream had not reported then (a new or
// reconnected Envoy), those of the current slot so far: the first stream
// to report has the fleet's demand to itself.
func (b *bucket) demand(now time.Time, interval time.Duration) (own, fleet int64) {
	slot := slotOf(now, interval)
	if b.fleetBefore == 0 || b.newIn(slot) {
		return b.ownIn(slot), b.fleet
	}
	return b.ownIn(slot - 1), b.fleetBefore
}

// newIn reports whether every report of the bucket came in slot.
func (b *bucket) newIn(slot int64) bool {
	for _, s := range b.recent {
		if s.slot != 0 && s.slot < slot {
			return false
		}
	}
	return true
}

func (b *bucket) ownIn(slot int64) int64 {
	var n int64
	for _, s := range b.recent {
		if s.slot == slot {
			n += s.demand
		}
	}
	return n
}

// maxCount bounds a bucket's counts: far above any limit (uint32), and
// exact in the Lua scripts' doubles.
const maxCount = 1 << 53

func clampCount(n uint64) int64 {
	return int64(min(n, maxCount))
}

// bucketID reads a bucket_id within the bounds: its bucketKey and its
// entries sorted by key, or which bound it breaks.
func bucketID(id *rlqspb.BucketId, maxEntries, maxBytes int) (string, []rules.Entry, error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", nil, fmt.Errorf("empty bucket_id (a bucket_matchers action without bucket_id_builder): it cannot be assigned")
	case len(m) > maxEntries:
		return "", nil, fmt.Errorf("bucket_id of %d entries, more than the bound of %d", len(m), maxEntries)
	}
	entries := make([]rules.Entry, 0, len(m))
	size := 0
	for k, v := range m {
		if k == "" {
			return "", nil, fmt.Errorf("bucket_id with an empty key")
		}
		size += len(k) + len(v)
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	if size > maxBytes {
		return "", nil, fmt.Errorf("bucket_id of %d bytes, more than the bound of %d", size, maxBytes)
	}
	slices.SortFunc(entries, func(a, b rules.Entry) int { return strings.Compare(a.Key, b.Key) })
	return bucketKey(entries), entries, nil
}

// bucketKey writes sorted entries as each key and value's length, ':' and
// bytes: two bucket_ids share a key only when equal.
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

// actionID returns the bucket_id of the bucket's action: the report's when
// one carried it this round, else one built from its entries
// (docs/benchmarks.md says why no map is kept per bucket).
func (b *bucket) actionID() *rlqspb.BucketId {
	if b.id != nil {
		return b.id
	}
	m := make(map[string]string, len(b.entries))
	for _, e := range b.entries {
		m[e.Key] = e.Value
	}
	return &rlqspb.BucketId{Bucket: m}
}

// orderFor returns the order of sorted that a rule of domain matches, as
// the comment on maxPermuted says; sorted when none does.
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

// resolve sets b's counters, mode and demand key from the rules of the
// stream's domain in set (nil: no rules, allow-all).
func (st *stream) resolve(b *bucket, set *rules.Set) {
	b.set, b.counters, b.shadow, b.failure = set, b.counters[:0], false, st.s.opts.FailureMode
	if set == nil || !set.HasDomain(st.domain) {
		return
	}
	order := orderFor(set, st.domain, b.entries)
	// Without an override, Resolve cannot fail.
	if err := set.Resolve(&st.res, st.domain, []rules.Descriptor{{Entries: order}}); err != nil {
		return
	}
	d := &st.res.Descriptors[0]
	if d.Rule != nil {
		b.shadow = d.Mode == limit.Advisory
		if d.Rule.FailureMode != rules.FailureDefault {
			b.failure = d.Rule.FailureMode
		}
	}
	for _, l := range d.Limits {
		if !l.Counted() {
			continue
		}
		if len(b.counters) == 0 {
			b.demandKey = unique.Make(l.DemandKey(st.s.demand.Window))
		}
		b.counters = append(b.counters, counter{key: unique.Make(l.Key), spec: l.Limit.Spec})
	}
	st.res.Reset()
}
