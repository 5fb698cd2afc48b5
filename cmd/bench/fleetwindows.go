package main

// What the fleet admitted against the limit: per bucket and window, and
// how the tracked bucket's split followed the shift of its demand.

import (
	"math"
	"time"
)

// Bucket classes for the windows: a bucket whose demand per window is at
// least overDemand times the limit must see the limit admitted; one at
// most underDemand times it must see nothing refused.
const (
	overDemand  = 1.5
	underDemand = 0.5
)

// windowFigures is what the fleet admitted per window of the limit, over
// the windows wholly inside the measured run.
type windowFigures struct {
	Windows int `json:"windows"`
	Limit   int `json:"limit"`
	// OverBuckets have a demand of at least 1.5 limits a window; Admitted
	// is, over their windows, what they admitted as a share of the limit,
	// and WorstExcess the most one admitted beyond it in one window.
	OverBuckets int    `json:"over_buckets"`
	Admitted    spread `json:"admitted_share_of_limit"`
	WorstExcess int64  `json:"worst_excess"`
	// UnderBuckets have a demand of at most half a limit a window;
	// UnderRefused is the share of their requests refused.
	UnderBuckets int     `json:"under_buckets"`
	UnderRefused float64 `json:"under_refused_share"`
}

// demandPerWindow is bucket b's fleet demand per window before the shift.
func (d *demand) demandPerWindow(b, envoys int, window time.Duration) float64 {
	return d.perEnvoy * float64(envoys) * d.weight(b) * window.Seconds()
}

// wholeWindows returns the first and last windows wholly inside [from, to).
func wholeWindows(window time.Duration, from, to time.Time) (first, last int64) {
	w := int64(window)
	first = (from.UnixNano() + w - 1) / w
	last = to.UnixNano()/w - 1
	return first, last
}

// windowsOf computes the window figures of a run between from and to.
func windowsOf(fr *fleetRun, from, to time.Time, o *fleetOptions) windowFigures {
	wf := windowFigures{Limit: o.Limit}
	first, last := wholeWindows(o.Window, from, to)
	var shares []float64
	var under, refused int64
	for b := range o.Buckets {
		dw := fr.d.demandPerWindow(b, o.Envoys, o.Window)
		isOver, isUnder := dw >= overDemand*float64(o.Limit), dw <= underDemand*float64(o.Limit)
		wf.OverBuckets += b2int(isOver)
		wf.UnderBuckets += b2int(isUnder)
		for w := first; w <= last; w++ {
			wc := fr.counts.windowCopy(w)
			if wc == nil {
				continue
			}
			switch {
			case isOver:
				shares = append(shares, float64(wc.admitted[b])/float64(o.Limit))
				wf.WorstExcess = max(wf.WorstExcess, wc.admitted[b]-int64(o.Limit))
			case isUnder:
				under += wc.admitted[b] + wc.denied[b]
				refused += wc.denied[b]
			}
		}
	}
	wf.Windows = int(max(last-first+1, 0))
	wf.Admitted = spreadOf(shares)
	if under > 0 {
		wf.UnderRefused = float64(refused) / float64(under)
	}
	return wf
}

func b2int(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shiftTolerance is how close group A's share of the tracked bucket's
// admissions must come to its share of the demand for the split to have
// followed the shift.
const shiftTolerance = 0.05

// followWindow is how many seconds in a row the share is averaged over.
const followWindow = 5

// shiftFigures is how the tracked bucket's split followed the shift.
type shiftFigures struct {
	// Over says the bucket's demand passed its limit, so that the split
	// is the assignments' (under it, every request passes).
	Over bool `json:"over_limit"`
	// Before and After are group A's share of what the bucket admitted in
	// the 10 s before the shift and over the run's last 5 s; Target is
	// its share of the demand after the shift.
	Before float64 `json:"share_before"`
	After  float64 `json:"share_after"`
	Target float64 `json:"target"`
	// FollowSec is the time from the shift to the first second from
	// which A's share, averaged over 5 s, is within 0.05 of Target; -1
	// when it never was.
	FollowSec float64 `json:"follow_s"`
}

// shiftOf computes the shift figures of a run that ended at end, under a
// limit of limit a window; nil without a shift.
func shiftOf(fr *fleetRun, end time.Time, limit int) *shiftFigures {
	if fr.shiftAt.IsZero() {
		return nil
	}
	n := len(fr.qs) + len(fr.rs)
	s0 := fr.shiftAt.Unix() + 1 // the first whole second after the shift
	secs := fr.counts.trackedSeconds(s0-10, end.Unix()-1)
	sf := &shiftFigures{Target: trackedShareAfter(n), FollowSec: -1, After: -1,
		Over: fr.d.demandPerWindow(0, n, fr.counts.window) >= float64(limit)}
	sf.Before = shareA(secs[:min(10, len(secs))])
	if len(secs) > 10 {
		sf.After = shareA(secs[max(10, len(secs)-followWindow):])
	}
	for i := 10; i+followWindow <= len(secs); i++ {
		if math.Abs(shareA(secs[i:i+followWindow])-sf.Target) <= shiftTolerance {
			sf.FollowSec = float64(s0+int64(i-10)) - float64(fr.shiftAt.UnixNano())/1e9
			break
		}
	}
	return sf
}

// shareA is group A's share of the admissions over secs; -1 when there
// was none.
func shareA(secs [][2][2]int64) float64 {
	var a, all int64
	for _, s := range secs {
		a += s[0][0]
		all += s[0][0] + s[1][0]
	}
	if all == 0 {
		return -1
	}
	return float64(a) / float64(all)
}
