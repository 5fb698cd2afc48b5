package memcachelimit

import (
	"math"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// call is the working memory of one Evaluate, reused across calls: plan
// builds one command per hit (cmdAddIncr to consume, incr by 0 to read),
// decide turns the replies into decisions, settle builds the decrs. A call
// with a hit that blocks whatever the store holds (an enforced cost above
// the limit, or a limit of 0) is static: it only reads, adding its costs
// to what it reads, but still increments for its usage hits.
type call struct {
	hits   []hitState
	slots  []slot
	cmds   []command // the first step's commands
	cmds2  []command // the second step's
	ptrs   []*command
	buf    []byte
	static bool
}

// hitState is what a call knows of one hit.
type hitState struct {
	slot int   // index in call.slots; -1 for a limit of 0, which needs no store
	end  int64 // end of the hit's window, µs
	cmd  int   // index of its command in call.cmds; -1 when none
	// consume: the hit takes its cost (cost > 0, no refund, not above the
	// limit unless a charge); write: the first step incremented for it;
	// charge: a usage hit that consumes.
	consume, write, charge bool
	// stored is the count before the call, as seen at the hit's turn.
	stored int64
	refund int // index of its refund in call.cmds2; -1 when none
}

// slot is one counter window that hits of the call share.
type slot struct {
	key string
	srv *server
	// Costs over the call's hits so far: counted but not sent (static),
	// consumed, denied (but charges), added by the first step, and the part
	// of those that charges added.
	virtual, consumed, denied, charged, usage int64
	// after is the count a blocked call's usage hits leave; -1 before its
	// first hit.
	after int64
}

func (c *call) reset() {
	clear(c.slots) // drop keys and servers
	clear(c.cmds)
	clear(c.cmds2)
	clear(c.ptrs)
	c.hits, c.slots, c.cmds, c.cmds2, c.ptrs = c.hits[:0], c.slots[:0], c.cmds[:0], c.cmds2[:0], c.ptrs[:0]
}

// plan builds the first step's commands for hits at now.
func (c *call) plan(l *Limiter, hits []limit.Hit, now time.Time) {
	servers := l.pool.list()
	c.static = false
	for i := range hits {
		h := &hits[i]
		if h.Cost > 0 && !h.Refund && !h.Usage && h.Mode == limit.Enforce && (h.Spec.Limit == 0 || h.Cost > h.Spec.Limit) {
			c.static = true
		}
	}
	for i := range hits {
		h := &hits[i]
		hs := hitState{slot: -1, cmd: -1, refund: -1}
		if h.Spec.Limit > 0 {
			start, end := h.Spec.WindowAt(now)
			hs.end = end.UnixMicro()
			c.buf = AppendKey(c.buf[:0], l.opts.KeyPrefix, start.UnixMicro(), h.Key)
			hs.slot = c.slotFor(c.buf, servers)
			sl := &c.slots[hs.slot]
			cmd := command{kind: cmdIncr, key: sl.key, srv: sl.srv}
			hs.consume = h.Cost > 0 && !h.Refund && (h.Usage || h.Cost <= h.Spec.Limit)
			hs.charge = hs.consume && h.Usage
			if hs.consume && (!c.static || hs.charge) {
				cmd.kind, cmd.delta, cmd.exp = cmdAddIncr, uint64(h.Cost), expiry(now, end)
				hs.write = true
			}
			hs.cmd = len(c.cmds)
			c.cmds = append(c.cmds, cmd)
		}
		c.hits = append(c.hits, hs)
	}
	c.ptrs = pointers(c.ptrs[:0], c.cmds)
}

// slotFor returns the slot of the counter window key, adding it if new.
func (c *call) slotFor(key []byte, servers []*server) int {
	for i := range c.slots {
		if c.slots[i].key == string(key) {
			return i
		}
	}
	k := string(key)
	c.slots = append(c.slots, slot{key: k, srv: pick(servers, k)})
	return len(c.slots) - 1
}

func pointers(dst []*command, cmds []command) []*command {
	for i := range cmds {
		dst = append(dst, &cmds[i])
	}
	return dst
}

// decide sets decisions from the first step's replies, with limit's
// fixed-window arithmetic, and reports whether the call blocks. A
// consuming hit's reply counts its own cost and the call's earlier denied
// hits', which limit.Memory would not have added: the hit sees it less
// those.
func (c *call) decide(hits []limit.Hit, decisions []limit.Decision, now int64) (blocked bool) {
	for i := range hits {
		h, hs := &hits[i], &c.hits[i]
		if hs.slot < 0 {
			// Limit 0: decided without the store, as limit's step does.
			allowed := h.Cost == 0 || h.Refund
			decisions[i] = limit.Decision{Allowed: allowed, Never: !allowed}
			continue
		}
		sl := &c.slots[hs.slot]
		n := count(&c.cmds[hs.cmd])
		if hs.consume {
			sl.consumed += h.Cost
			if hs.write {
				sl.charged += h.Cost
			} else {
				sl.virtual += h.Cost
			}
		}
		if hs.charge {
			sl.usage += h.Cost
		}
		n += sl.virtual
		hs.stored = max(0, n-sl.consumed)
		lim, reset := h.Spec.Limit, micros(hs.end-now)
		d := limit.Decision{ResetAfter: reset}
		switch w := max(0, n-sl.denied); {
		case h.Refund:
			// A call that consumes sets them again (refunded).
			d.Allowed, d.Remaining, d.Debt = true, max(0, lim-hs.stored), max(0, hs.stored-lim)
		case hs.consume:
			w = max(0, w-h.Cost)
			switch {
			case w+h.Cost <= lim:
				d.Allowed, d.Remaining = true, lim-w-h.Cost
			case hs.charge:
				d = charged(lim, w+h.Cost, h.Cost, reset)
			default:
				sl.denied += h.Cost
				d.Remaining, d.Debt, d.RetryAfter = max(0, lim-w), max(0, w-lim), reset
			}
		case h.Cost > 0:
			// Above what the limit can ever admit: a peek's answer, never.
			d.Never, d.Remaining, d.Debt = true, max(0, lim-w), max(0, w-lim)
		case w <= lim:
			d.Allowed, d.Remaining = true, lim-w
		default:
			d.RetryAfter, d.Debt = reset, w-lim
		}
		decisions[i] = d
	}
	blocked = limit.Blocked(hits, decisions)
	if blocked {
		c.blocked(hits, decisions)
	}
	return blocked
}

// blocked sets the decisions of a call that blocks: only its usage hits
// consume, replayed in order on the stored counts, and the other allowed
// hits report the counts they leave.
func (c *call) blocked(hits []limit.Hit, decisions []limit.Decision) {
	for i := range c.slots {
		c.slots[i].after = -1
	}
	for i := range hits {
		h, hs := &hits[i], &c.hits[i]
		if hs.slot < 0 {
			continue
		}
		sl := &c.slots[hs.slot]
		if sl.after < 0 {
			sl.after = hs.stored
		}
		switch lim, reset := h.Spec.Limit, decisions[i].ResetAfter; {
		case hs.charge && sl.after+h.Cost <= lim:
			decisions[i] = limit.Decision{Allowed: true, Remaining: lim - sl.after - h.Cost, ResetAfter: reset}
			sl.after += h.Cost
		case hs.charge:
			sl.after += h.Cost
			decisions[i] = charged(lim, sl.after, h.Cost, reset)
		case h.Usage && h.Refund:
			sl.after = max(0, sl.after-h.Cost) // decided by its decr (refunded)
		}
	}
	for i := range hits {
		h, hs := &hits[i], &c.hits[i]
		if hs.slot >= 0 && !(h.Usage && h.Cost > 0) && decisions[i].Allowed {
			after := c.slots[hs.slot].after
			decisions[i] = limit.Decision{Allowed: true, Remaining: max(0, h.Spec.Limit-after), Debt: max(0, after-h.Spec.Limit),
				ResetAfter: decisions[i].ResetAfter}
		}
	}
}

// charged is the decision of a charge of cost that took its counter past
// lim, to count, as limit's fixed window gives it.
func charged(lim, count, cost int64, reset time.Duration) limit.Decision {
	if cost > lim {
		return limit.Decision{ResetAfter: reset, Never: true, Debt: count - lim}
	}
	return limit.Decision{ResetAfter: reset, RetryAfter: reset, Debt: count - lim}
}

// settle returns the second step's decrs: every increment but charges'
// of a call that blocks, else the denied hits'; then the refunds in order
// (of a call that blocks, only the usage refunds).
func (c *call) settle(hits []limit.Hit, blocked bool) []*command {
	c.cmds2 = c.cmds2[:0]
	for i := range c.slots {
		sl := &c.slots[i]
		undo := sl.denied
		if blocked {
			undo = sl.charged - sl.usage
		}
		if undo > 0 {
			c.cmds2 = append(c.cmds2, command{kind: cmdDecr, key: sl.key, srv: sl.srv, delta: uint64(undo)})
		}
	}
	for i := range hits {
		if h := &hits[i]; !blocked || h.Usage {
			if hs := &c.hits[i]; hs.slot >= 0 && h.Refund {
				sl := &c.slots[hs.slot]
				hs.refund = len(c.cmds2)
				c.cmds2 = append(c.cmds2, command{kind: cmdDecr, key: sl.key, srv: sl.srv, delta: uint64(hits[i].Cost)})
			}
		}
	}
	c.ptrs = pointers(c.ptrs[:0], c.cmds2)
	return c.ptrs
}

// refunded sets the refunds' Remaining from the count their decr left.
func (c *call) refunded(hits []limit.Hit, decisions []limit.Decision) {
	for i := range hits {
		if hs := &c.hits[i]; hs.refund >= 0 {
			n := count(&c.cmds2[hs.refund])
			decisions[i].Remaining, decisions[i].Debt = max(0, hits[i].Spec.Limit-n), max(0, n-hits[i].Spec.Limit)
		}
	}
}

// undoPartial returns, after a first step that failed, the commands that
// give back what the servers that answered every command took.
func (c *call) undoPartial() []*command {
	c.cmds2 = c.cmds2[:0]
	for i := range c.slots {
		sl := &c.slots[i]
		var taken int64
		answered := true
		for j := range c.cmds {
			cmd := &c.cmds[j]
			if cmd.srv != sl.srv {
				continue
			}
			answered = answered && cmd.done
			if cmd.key == sl.key && cmd.kind == cmdAddIncr && cmd.done {
				taken += int64(cmd.delta)
			}
		}
		if answered && taken > 0 {
			c.cmds2 = append(c.cmds2, command{kind: cmdDecr, key: sl.key, srv: sl.srv, delta: uint64(taken)})
		}
	}
	c.ptrs = pointers(c.ptrs[:0], c.cmds2)
	return c.ptrs
}

// count returns a reply's count: 0 when the counter does not exist, and at
// most 2^62 so that sums of counts and costs cannot overflow.
func count(cmd *command) int64 {
	if !cmd.found {
		return 0
	}
	return int64(min(cmd.value, math.MaxInt64>>1))
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
