package dropin

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statsFlush is how often both servers send their statsd counters.
const statsFlush = 200 * time.Millisecond

// ruleStats is the prefix of the counters of each rule: total_hits,
// over_limit, near_limit, within_limit, shadow_mode.
const ruleStats = "ratelimit.service.rate_limit."

// checkStats compares the rules' statsd counters of both servers, summed
// over every flush, once neither has sent one for five flush intervals:
// by then each has flushed what the calls counted.
func checkStats(t *testing.T, ref, fg server) {
	t.Helper()
	refSums, fgSums := map[string]float64{}, map[string]float64{}
	deadline := time.Now().Add(30 * time.Second)
	for quiet := time.Duration(0); quiet < 5*statsFlush; {
		if time.Now().After(deadline) {
			t.Fatal("statsd: the servers kept sending the rules' counters for 30 s")
		}
		start := time.Now()
		got := addCounters(t, ref.stats.Lines(t), refSums) + addCounters(t, fg.stats.Lines(t), fgSums)
		if got > 0 {
			quiet = 0
		} else {
			quiet += time.Since(start)
		}
	}
	if len(refSums) == 0 {
		t.Fatal("statsd: the reference sent no rule counter")
	}
	for _, name := range keys(refSums, fgSums) {
		r, inRef := refSums[name]
		f, inFg := fgSums[name]
		if r != f || inRef != inFg {
			t.Errorf("statsd %s: reference %s, floodgate %s", name, sent(r, inRef), sent(f, inFg))
		}
	}
}

// addCounters adds the rules' counters among statsd lines
// (name:value|c, and DogStatsD's name:value|c|#tags, by name and tags)
// into sums and returns how many it added.
func addCounters(t *testing.T, lines []string, sums map[string]float64) int {
	t.Helper()
	n := 0
	for _, line := range lines {
		name, rest, _ := strings.Cut(line, ":")
		fields := strings.Split(rest, "|")
		if !strings.HasPrefix(name, ruleStats) || len(fields) < 2 || fields[1] != "c" {
			continue
		}
		// DogStatsD's tags (|#k:v) are part of what is compared.
		for _, f := range fields[2:] {
			if strings.HasPrefix(f, "#") {
				name += "|" + f
			}
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			t.Fatalf("statsd line %q: %v", line, err)
		}
		sums[name] += v
		n++
	}
	return n
}

func sent(v float64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprint(v)
}
