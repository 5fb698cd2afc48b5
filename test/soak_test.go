package test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// soakFor is TestSoak's length; `make soak` sets it to minutes.
var soakFor = flag.Duration("soak", 0, "length of TestSoak (default "+shortSoak.String()+", the CI version)")

const (
	// shortSoak is TestSoak's length in `make test`.
	shortSoak = 20 * time.Second
	// reloadEvery is the pace of rule changes during a soak; every
	// brokenEvery-th change is a broken file, which must be refused.
	reloadEvery = 2 * time.Second
	brokenEvery = 4
)

// soakRules is a good rule set; version varies the per-user limit so that
// each change is a real reload.
func soakRules(version int) string {
	return fmt.Sprintf(`domain: soak
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: %d, algorithm: sliding_window, precision: 6}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket, burst: 100}
`, 20+version%5)
}

// sample is one reading of the server process's resources.
type sample struct {
	at               time.Duration
	rssKB            int64
	goroutines, fds  int
	redisConnections int
}

func (s sample) String() string {
	return fmt.Sprintf("%6.1fs rss %6d kB, %4d goroutines, %3d fds, %3d Redis connections",
		s.at.Seconds(), s.rssKB, s.goroutines, s.fds, s.redisConnections)
}

// TestSoak runs steady load with rule changes every reloadEvery (every
// brokenEvery-th one broken) for -soak (shortSoak by default), and checks
// that nothing but the injected broken files produced an error and that
// the process's goroutines, open files, Redis connections and memory stay
// flat: at rest after the run they are what they were at rest after a
// warm-up, and the resident memory under load does not keep growing.
func TestSoak(t *testing.T) {
	t.Parallel()
	length := *soakFor
	if length == 0 {
		length = shortSoak
	}
	r := redistest.Start(t)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"soak.yaml": soakRules(0)})
	// A generous deadline: errors from a loaded machine are not the
	// subject here, and every one fails the test.
	p := start(t, options{args: []string{"-redis", r.Addr, "-config", dir, "-redis-deadline", "2s"}})
	pid := p.Pid()
	t0 := time.Now()
	take := func() sample {
		s := sample{at: time.Since(t0), rssKB: rssKB(t, pid), goroutines: int(p.metric("go_goroutines")), fds: openFDs(t, pid)}
		info, err := r.Info("clients")
		if err != nil {
			t.Fatal(err)
		}
		// Less the one of this INFO command.
		s.redisConnections, _ = strconv.Atoi(info["connected_clients"])
		s.redisConnections--
		return s
	}
	next := func(w, i int) (string, *pb.RateLimitRequest) {
		n := w*100003 + i
		if n%4 == 0 {
			return "api", request("soak", desc("api", fmt.Sprintf("k%d", n%10)))
		}
		return "user", request("soak", desc("user", fmt.Sprintf("u%d", n%2000)))
	}
	// At rest: nothing in flight, the connection pool as the load left it.
	atRest := func() sample {
		time.Sleep(time.Second)
		return take()
	}

	warmUp := max(3*time.Second, length/5)
	l := startLoad([]*proc{p}, 8, 5*time.Millisecond, next)
	time.Sleep(warmUp)
	warm := l.finish()
	rest0 := atRest()

	l = startLoad([]*proc{p}, 8, 5*time.Millisecond, next)
	var samples []sample
	changes, broken := 0, 0
	end := time.Now().Add(length)
	for tick := time.NewTicker(reloadEvery); time.Now().Before(end); <-tick.C {
		samples = append(samples, take())
		changes++
		if changes%brokenEvery == 0 {
			broken++
			writeRules(t, dir, map[string]string{"soak.yaml": soakRules(changes) + "  - key: oops\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
			continue
		}
		// A rename over the file, or a second file coming and going.
		if changes%3 == 0 {
			writeRules(t, dir, map[string]string{"extra.yaml": "domain: soak_extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
		} else if err := os.Remove(filepath.Join(dir, "extra.yaml")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		writeRules(t, dir, map[string]string{"soak.yaml": soakRules(changes)})
	}
	out := append(warm, l.finish()...)
	rest1 := atRest()
	samples = append(samples, rest1)

	report := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "at rest after warm-up: %v\nunder load:\n", rest0)
		for _, s := range samples[:len(samples)-1] {
			fmt.Fprintf(&b, "  %v\n", s)
		}
		fmt.Fprintf(&b, "at rest at the end:    %v\nanswers:\n%s", rest1, answerCounts(out))
		return b.String()
	}
	t.Logf("%d requests, %d rule changes (%d broken) in %v\n%s", len(out), changes, broken, length, report())

	// No error but the injected ones.
	for _, o := range out {
		if !soakAnswer.MatchString(o.answer) {
			t.Errorf("%s answered %q\n%s", o.tag, o.answer, report())
			break
		}
	}
	if got := p.metric(`floodgate_store_errors_total{store="redis"}`); got != 0 {
		t.Errorf("%v store errors", got)
	}
	if got := p.metric(`floodgate_rules_reloads_total{result="failure"}`); got < float64(broken) || broken == 0 {
		t.Errorf("%v refused reloads for %d broken files", got, broken)
	}
	if got := p.metric("floodgate_rules_version"); got < float64(changes-broken)/2 {
		t.Errorf("rules version %v after %d good changes: the changes were not taken up", got, changes-broken)
	}
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		if (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) &&
			!strings.Contains(line, "reload refused") && !strings.Contains(line, "fortnight") {
			t.Errorf("unexpected log line: %s", line)
		}
	}

	// Flat: at rest, what it was at rest before; under load, memory stops
	// growing.
	if rest1.goroutines > rest0.goroutines+3 {
		t.Errorf("goroutines at rest grew from %d to %d\n%s", rest0.goroutines, rest1.goroutines, report())
	}
	if rest1.fds > rest0.fds+3 {
		t.Errorf("open files at rest grew from %d to %d\n%s", rest0.fds, rest1.fds, report())
	}
	if rest1.redisConnections > rest0.redisConnections+3 {
		t.Errorf("Redis connections at rest grew from %d to %d\n%s", rest0.redisConnections, rest1.redisConnections, report())
	}
	half := samples[:len(samples)/2]
	var firstMax, lastMax int64
	for _, s := range half {
		firstMax = max(firstMax, s.rssKB)
	}
	for _, s := range samples[len(samples)/2:] {
		lastMax = max(lastMax, s.rssKB)
	}
	if limit := firstMax + firstMax/4 + 16<<10; lastMax > limit {
		t.Errorf("resident memory grew: %d kB at most in the first half of the run, %d kB in the second (limit %d kB)\n%s",
			firstMax, lastMax, limit, report())
	}
	checkNoCrash(t, p)
}

// soakAnswer is a decision: within or over a limit.
var soakAnswer = regexp.MustCompile(`^(OK OK|OVER OVER):\d+$`)

// rssKB reads the resident set size of process pid.
func rssKB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the process status (the soak test needs Linux's /proc): %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// openFDs counts the open file descriptors of process pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("listing open files (the soak test needs Linux's /proc): %v", err)
	}
	return len(entries)
}
