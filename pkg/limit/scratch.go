package limit

// scratch is the working memory of one Evaluate call, reused across calls.
type scratch struct {
	slots  []slot // a working copy of state per distinct key of the call
	slotOf []int  // slotOf[i] is the index in slots of hits[i]'s key
}

// slot is the working copy of one counter during a call.
type slot struct {
	key   string
	shard *shard
	entry *entry // the stored counter, nil if none
	ok    bool   // whether the working state exists
	st    state
	// shared reports that st.runs is the entry's own, not a copy.
	shared bool
	dirty  bool  // a hit wrote the working state
	ttl    int64 // of the last write
}

// apply steps every hit of the call on the working copies of their
// counters, in order, and sets its decision. With usageOnly, the call is
// blocked: it steps the usage hits alone (see countUsage), and the other
// allowed hits report a look at the state after them.
func (sc *scratch) apply(hits []Hit, decisions []Decision, now int64, usageOnly bool) {
	for i := range hits {
		h := &hits[i]
		sl := &sc.slots[sc.slotOf[i]]
		if usageOnly && !h.charges() {
			continue
		}
		o := step(&sl.st, sl.ok, &h.Spec, now, h.Cost, h.Refund, h.Usage)
		if o.write {
			sl.dirty, sl.ok, sl.ttl = true, o.resetAfter > 0, o.resetAfter
		}
		decisions[i] = o.decision()
	}
	if !usageOnly {
		return
	}
	for i := range hits {
		if sl := &sc.slots[sc.slotOf[i]]; !hits[i].charges() && decisions[i].Allowed {
			decisions[i] = peek(sl.st, sl.ok, &hits[i].Spec, now)
		}
	}
}

// block applies a blocked call's usage hits, which change their counters
// whatever the verdict, and nothing else, again from the stored state when
// the call has other hits too. When it has none, every allowed hit reports
// a look at the stored state, and block returns false: nothing to store.
func (sc *scratch) block(hits []Hit, decisions []Decision, now int64) (write bool) {
	switch usage := countUsage(hits); {
	case usage == 0:
		for i := range hits {
			if decisions[i].Allowed {
				sl := &sc.slots[sc.slotOf[i]]
				var st state
				if sl.entry != nil {
					st = sl.entry.st
				}
				decisions[i] = peek(st, sl.entry != nil, &hits[i].Spec, now)
			}
		}
		return false
	case usage < len(hits):
		sc.load(false)
		sc.apply(hits, decisions, now, true)
	}
	return true
}

// charges reports whether h is a usage hit that changes its counter
// whatever the call's verdict: a charge or a usage refund.
func (h *Hit) charges() bool { return h.Usage && h.Cost > 0 }

// countUsage returns the number of hits that charge (Hit.charges).
func countUsage(hits []Hit) int {
	n := 0
	for i := range hits {
		if hits[i].charges() {
			n++
		}
	}
	return n
}

// load makes every slot's working state the stored one (slot.load).
func (sc *scratch) load(shared bool) {
	for i := range sc.slots {
		sc.slots[i].load(shared)
	}
}

// overflow returns the slot of a counter to create in a shard that would
// then hold more than its capacity, or nil if the call's counters fit. The
// shards are locked and rid of expired counters.
func (sc *scratch) overflow() *slot {
	for i := range sc.slots {
		sl := &sc.slots[i]
		if !sl.creates() {
			continue
		}
		// Count what the call's stores would do to this shard.
		s := sl.shard
		n := len(s.entries)
		for j := range sc.slots {
			switch o := &sc.slots[j]; {
			case o.shard != s:
			case o.creates():
				n++
			case o.dirty && !o.ok && o.entry != nil:
				n-- // deleted: its state became equivalent to none
			}
		}
		if n > s.capacity {
			return sl
		}
	}
	return nil
}

// creates reports whether storing the slot creates a counter.
func (sl *slot) creates() bool { return sl.dirty && sl.ok && sl.entry == nil }

// slotFor returns the slot of an earlier hit with the given key, or -1.
// Calls have few hits, so a scan beats a map.
func (sc *scratch) slotFor(earlier []Hit, key string) int {
	for i := range earlier {
		if earlier[i].Key == key {
			return sc.slotOf[i]
		}
	}
	return -1
}

// growSlot appends a slot to slots, reusing the runs buffer a previous call
// left in that position.
func growSlot(slots []slot) []slot {
	var buf runs
	if n := len(slots); n < cap(slots) {
		buf = slots[:n+1][n].st.runs[:0]
	}
	return append(slots, slot{st: state{runs: buf}})
}

// load makes the stored state the working one, unwritten: a copy, or, if
// shared, the stored state itself. The shard is locked.
func (sl *slot) load(shared bool) {
	buf := sl.st.runs[:0]
	e := sl.shard.entries[sl.key]
	sl.entry, sl.ok, sl.shared = e, e != nil, shared && e != nil
	sl.dirty, sl.ttl = false, 0
	switch {
	case e == nil:
		sl.st = state{runs: buf}
	case shared:
		sl.st = e.st
	default:
		sl.st = e.st
		sl.st.runs = append(buf, e.st.runs...)
	}
}

// peek returns the decision of an allowed hit in a blocked call: a look
// (cost 0) at st, the stored state or the working one after the call's
// usage hits, which it leaves as it is (see step).
func peek(st state, ok bool, sp *Spec, now int64) Decision {
	o := step(&st, ok, sp, now, 0, false, false)
	o.allowed, o.retryAfter, o.never = true, 0, false
	return o.decision()
}

// store makes the working state the stored one, or deletes the counter when
// the working state is equivalent to none. The shard is locked.
func (sl *slot) store(now int64) {
	s := sl.shard
	e := sl.entry
	if !sl.ok {
		if e != nil {
			s.remove(e)
		}
		return
	}
	if e == nil {
		// overflow made sure it fits.
		e = &entry{key: sl.key, index: -1}
	}
	runs := sl.st.runs
	if !sl.shared {
		runs = append(e.st.runs[:0], runs...)
	}
	e.st = sl.st
	e.st.runs = runs
	e.expires = now + sl.ttl
	if e.index < 0 {
		s.entries[e.key] = e
		s.push(e)
	} else {
		s.fix(e.index)
	}
}
