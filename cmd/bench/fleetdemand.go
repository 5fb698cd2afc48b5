package main

// The fleet's demand: which bucket (an API key, the same for RLS's
// descriptor and RLQS's bucket_id) each simulated request falls in. Every
// Envoy sees the same skew, as behind a load balancer that spreads
// clients at random: bucket k's weight is 1/(k+1)^s (Zipf), the hottest
// first. At the shift, the Envoys of group A (the first half) triple
// their demand for the hottest bucket, so that A's share of its demand
// goes from one half to three quarters and the assignments must follow.

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// shiftFactor is what the shift multiplies group A's demand for the
// tracked bucket by.
const shiftFactor = 3

// demand is the fleet's demand model; read-only once built, shared.
type demand struct {
	buckets int
	// cum is the cumulative weight of buckets 0..k, the last 1.
	cum []float64
	// values are the buckets' key values (k0, k1, ...).
	values []string
	// perEnvoy is each Envoy's request rate per second.
	perEnvoy float64
	// shiftAt is when group A's demand for bucket 0 triples, in unix
	// nanoseconds (0: never); set while the Envoys run.
	shiftAt atomic.Int64
}

// newDemand returns the demand of envoys Envoys sending rate requests a
// second together over buckets buckets with Zipf exponent s (0: uniform).
func newDemand(buckets, envoys int, rate, s float64) *demand {
	d := &demand{buckets: buckets, cum: make([]float64, buckets), values: make([]string, buckets), perEnvoy: rate / float64(envoys)}
	var sum float64
	for k := range buckets {
		sum += math.Pow(float64(k+1), -s)
		d.cum[k] = sum
		d.values[k] = "k" + strconv.Itoa(k)
	}
	for k := range d.cum {
		d.cum[k] /= sum
	}
	return d
}

// weight is bucket k's share of an Envoy's requests before the shift.
func (d *demand) weight(k int) float64 {
	if k == 0 {
		return d.cum[0]
	}
	return d.cum[k] - d.cum[k-1]
}

// pick draws a bucket for one request.
func (d *demand) pick(r *rand.Rand) int {
	i, _ := slices.BinarySearch(d.cum, r.Float64())
	return min(i, d.buckets-1)
}

// shifted reports whether, at t, the shift is in force.
func (d *demand) shifted(t time.Time) bool {
	at := d.shiftAt.Load()
	return at != 0 && t.UnixNano() >= at
}

// extraTracked is the rate per second of the extra requests for bucket 0
// an Envoy of group A sends once the shift is in force.
func (d *demand) extraTracked() float64 {
	return (shiftFactor - 1) * d.perEnvoy * d.weight(0)
}

// inGroupA reports whether Envoy i belongs to group A, the half whose
// demand shifts.
func inGroupA(i, envoys int) bool { return i < (envoys+1)/2 }

// trackedShareAfter is group A's share of bucket 0's demand once shifted.
func trackedShareAfter(envoys int) float64 {
	a := float64((envoys + 1) / 2)
	b := float64(envoys) - a
	return shiftFactor * a / (shiftFactor*a + b)
}

// arrivals returns how many requests arrive in dt at rate per second: the
// whole part, plus one more with the probability of the fraction, so that
// the mean is exact and ticks need not be long.
func arrivals(r *rand.Rand, rate float64, dt time.Duration) int {
	x := rate * dt.Seconds()
	n := math.Floor(x)
	if r.Float64() < x-n {
		n++
	}
	return int(n)
}
