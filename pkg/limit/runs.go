package limit

import "slices"

// run is n hits recorded at one position: a sub-window index for
// SlidingWindow, a time in µs for SlidingLog.
type run struct{ at, n int64 }

// runs is a list of runs in ascending position with n > 0. add and
// takeNewest modify the list in place.
type runs []run

// dropBefore returns the runs positioned at or after from: a subslice of rs,
// which it does not modify.
func (rs runs) dropBefore(from int64) runs {
	i := 0
	for i < len(rs) && rs[i].at < from {
		i++
	}
	return rs[i:]
}

// upTo returns the number of runs positioned at or before at.
func (rs runs) upTo(at int64) int {
	i := len(rs)
	for i > 0 && rs[i-1].at > at {
		i--
	}
	return i
}

// add records n more hits at position at.
func (rs runs) add(at, n int64) runs {
	i := rs.upTo(at)
	if i > 0 && rs[i-1].at == at {
		rs[i-1].n += n
		return rs
	}
	return slices.Insert(rs, i, run{at: at, n: n})
}

// addUpTo records up to n more hits at position at, leaving at most most
// there, and reports whether it recorded any.
func (rs runs) addUpTo(at, n, most int64) (runs, bool) {
	have := int64(0)
	if i := rs.upTo(at); i > 0 && rs[i-1].at == at {
		have = rs[i-1].n
	}
	if n = min(n, most-have); n <= 0 {
		return rs, false
	}
	return rs.add(at, n), true
}

// takeNewest removes up to n hits positioned at or before upTo, newest
// first, and returns how many it removed.
func (rs runs) takeNewest(n, upTo int64) (runs, int64) {
	end := rs.upTo(upTo)
	i := end
	var taken int64
	for i > 0 && taken < n {
		take := min(n-taken, rs[i-1].n)
		rs[i-1].n -= take
		taken += take
		if rs[i-1].n > 0 {
			break
		}
		i--
	}
	// rs[i:end] are now empty.
	return append(rs[:i], rs[end:]...), taken
}

// total returns the number of hits in rs.
func (rs runs) total() int64 {
	var t int64
	for _, r := range rs {
		t += r.n
	}
	return t
}

// newest returns the position of the last run; rs must not be empty.
func (rs runs) newest() int64 { return rs[len(rs)-1].at }

// nthOldest returns the position of the i-th oldest hit (1-based); rs must
// hold at least i hits.
func (rs runs) nthOldest(i int64) int64 {
	for _, r := range rs {
		if i <= r.n {
			return r.at
		}
		i -= r.n
	}
	panic("limit: nthOldest beyond the log")
}
