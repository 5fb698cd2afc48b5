package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// decisionMetric is floodgate's histogram of the time it takes to answer
// ShouldRateLimit (pkg/envoy), from the request's arrival to its answer:
// the server's own share of the latency Envoy adds.
const decisionMetric = "floodgate_decision_duration_seconds"

// histogram is a Prometheus histogram summed over its label values: the
// cumulative count per upper bound (le, +Inf included), the sum and the
// count. The zero value is empty.
type histogram struct {
	buckets    map[float64]float64
	sum, count float64
}

func (h histogram) combine(b histogram, sign float64) histogram {
	out := histogram{buckets: map[float64]float64{}, sum: h.sum + sign*b.sum, count: h.count + sign*b.count}
	for le, n := range h.buckets {
		out.buckets[le] += n
	}
	for le, n := range b.buckets {
		out.buckets[le] += sign * n
	}
	return out
}

// minus is what h counted since b; plus adds b's counts.
func (h histogram) minus(b histogram) histogram { return h.combine(b, -1) }
func (h histogram) plus(b histogram) histogram  { return h.combine(b, 1) }

// mean is sum over count, in seconds; 0 when empty.
func (h histogram) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantile estimates the q-th quantile (0 < q < 1) in seconds as
// Prometheus's histogram_quantile does: linearly inside the bucket that
// holds it, from the bucket's lower bound (0 for the first); in the +Inf
// bucket, the highest finite bound. So it is only as fine as the buckets
// (floodgate's: 0.1, 0.25, 0.5, 1, 2.5 ms …). NaN when empty.
func (h histogram) quantile(q float64) float64 {
	les := slices.Sorted(maps.Keys(h.buckets))
	if len(les) == 0 || h.buckets[les[len(les)-1]] <= 0 {
		return math.NaN()
	}
	rank := q * h.buckets[les[len(les)-1]]
	lower, below := 0.0, 0.0
	for _, le := range les {
		n := h.buckets[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if n == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(n-below)
		}
		lower, below = le, n
	}
	return lower
}

// decisionHistogram reads decisionMetric from floodgate's /metrics on
// httpAddr, summed over its codes.
func decisionHistogram(ctx context.Context, httpAddr string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("floodgate /metrics: %s", resp.Status)
	}
	return parseHistogram(resp.Body, decisionMetric)
}

// parseHistogram reads the histogram name from Prometheus text, summing
// the series of every label value. A metric absent from the text (no
// decision yet) is an empty histogram.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	h := histogram{buckets: map[float64]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+"_")
		if !ok {
			continue
		}
		series, value, ok := strings.Cut(rest, " ")
		if !ok {
			return h, fmt.Errorf("/metrics: %q: no value", line)
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return h, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		kind, labels, _ := strings.Cut(series, "{")
		switch kind {
		case "sum":
			h.sum += v
		case "count":
			h.count += v
		case "bucket":
			le, err := labelLE(labels)
			if err != nil {
				return h, fmt.Errorf("/metrics: %q: %w", line, err)
			}
			h.buckets[le] += v
		}
	}
	return h, sc.Err()
}

// labelLE reads the value of the le label from a label set such as
// code="ok",le="0.001"}.
func labelLE(labels string) (float64, error) {
	_, after, ok := strings.Cut(labels, `le="`)
	if !ok {
		return 0, fmt.Errorf("no le label")
	}
	v, _, ok := strings.Cut(after, `"`)
	if !ok {
		return 0, fmt.Errorf("le label not closed")
	}
	return strconv.ParseFloat(v, 64) // "+Inf" parses as +Inf
}
