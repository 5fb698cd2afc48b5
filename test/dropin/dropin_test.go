// Package dropin runs floodgate beside the reference server
// (envoyproxy/ratelimit) to check that it is a drop-in: both read the same
// rules under the same variables, each with a store of its own (Redis, a
// Redis Cluster, Memcached), and get the same calls in the same order.
// Every answer must be the same, field by field, except where a step names
// the documented difference it shows (docs/migrating.md), and then it must
// differ in that difference's fields only, so that the list of differences
// stays true as either server changes.
//
// The reference is the binary Find gives for harness.Reference: `make
// test` builds the newest version the Go module proxy serves
// (REFERENCE_VERSION in the Makefile). A scenario or a difference that a
// later change of the reference's brought names that change, and an older
// build is held to what it answered before. Features newer than the
// proxy's version (rule metadata, wildcards inside a value) and Envoy's
// API after 1.37, which no version reads, are left out.
package dropin

import (
	"cmp"
	"debug/buildinfo"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// TestMain removes the floodgate binary the harness builds.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}

// step is one call, made to both servers.
type step struct {
	name string
	// One of: a ShouldRateLimit; the body of a POST to /json; a GET of a
	// path of the HTTP port; a gRPC health check of the service named;
	// rule files to write (by name, "" to remove one), after which req is
	// sent until both servers answer it with a limit: the new rules are
	// in force.
	req    *pb.RateLimitRequest
	json   string
	get    string
	health *string
	write  map[string]string
	// load are rule files to add, each written beside the rule directory
	// and renamed into it (one file event, as a ConfigMap's swap), after
	// which the debug port's /rlconfig is read until it lists their
	// domains: loaded, and no request counted to find out.
	load map[string]string
	// storeDown stops each server's Redis before the call.
	storeDown bool
	// as is the client certificate of the call in a scenario with
	// tlsCerts: "" the one the servers accept, else another of
	// tlsClients.
	as string
	// differs is the documented difference this step shows: the answers
	// must differ in its fields and no others. Nil means they must be the
	// same.
	differs *documented
}

// documented is a difference docs/migrating.md describes: its row, and
// the fields of an answer it changes, as diff names them.
type documented struct {
	row    string
	fields []string
	// since is the reference's change that brought the difference: a
	// reference built before it must give floodgate's answer. before is
	// the change that ended it: a reference built after it must.
	since, before *change
}

// scenario is a set of rule files, the variables both servers run with
// besides the common ones, and the calls.
type scenario struct {
	name  string
	files map[string]string // rule files by name, in the rule directory
	env   []string
	steps []step
	// ignore lists the answers' fields (as diff names them) left out of
	// the comparison, each with its reason in a comment.
	ignore []string
	// window is the shortest window of the scenario's rules: its calls
	// are played again when they cross one of its boundaries. Zero
	// means a minute.
	window time.Duration
	// store is where each server keeps its counters, a store of its own:
	// a single Redis unless set.
	store store
	// perSecond gives each server a second Redis for its limits of a
	// second (REDIS_PERSECOND).
	perSecond bool
	// unset are common variables the scenario's servers run without.
	unset []string
	// xds, when set, are the rules: both servers take them from one xDS
	// management server (CONFIG_TYPE=GRPC_XDS_SOTW), as from Envoy
	// Gateway, instead of files.
	xds []types.Resource
	// tls serves gRPC over mutual TLS (GRPC_SERVER_USE_TLS,
	// GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN), both servers with the
	// same files, certs (set by withTLS).
	tls   bool
	certs *tlsCerts
	// statsd has both servers send statsd, and compares the counters of
	// every rule (ratelimit.service.rate_limit.*) once the calls are made.
	statsd bool
	// prometheus has both servers serve their stats to Prometheus
	// (USE_PROMETHEUS) through this mapping, and compares every series
	// they serve there once the calls are made (checkPrometheus).
	prometheus mapping
}

// TestSameAnswers plays every scenario on both servers.
func TestSameAnswers(t *testing.T) {
	reference := harness.Require(t, harness.Reference)
	built, err := builtAt(reference)
	if err != nil {
		t.Logf("%v: compared as the newest", err)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { playBoth(t, reference, built, sc) })
	}
}

// playBoth plays a scenario on both servers, the reference's binary
// built at the time built, and compares their answers.
func playBoth(t *testing.T, reference string, built time.Time, sc scenario) {
	t.Helper()
	// A scenario that crosses a boundary of its windows may see them
	// restart between the two servers' answers to one step: it is played
	// again, on new servers.
	for attempt := 1; ; attempt++ {
		sc := withXDS(t, sc)
		sc = withTLS(t, sc)
		ref, fg := startServer(t, reference, sc), startServer(t, "", sc)
		steps, crossed := play(t, ref, fg, sc)
		if !crossed || attempt == 3 {
			check(t, sc, steps, built)
			if sc.statsd {
				checkStats(t, ref, fg)
			}
			if sc.prometheus != noPrometheus {
				checkPrometheus(t, ref, fg, steps)
			}
			return
		}
		t.Logf("attempt %d crossed a window's boundary: again", attempt)
	}
}

// withXDS starts the management server of a scenario with xDS rules and
// returns the scenario with the variables that reach it.
func withXDS(t *testing.T, sc scenario) scenario {
	t.Helper()
	if sc.xds == nil {
		return sc
	}
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("default", "1", sc.xds...)
	sc.env = append(slices.Clip(sc.env), "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+m.Addr)
	return sc
}

// played is what both servers answered to a step.
type played struct {
	step
	reference, floodgate answer
}

// play makes the scenario's calls to both servers. crossed reports that
// they did not all fall within one of the scenario's windows.
func play(t *testing.T, ref, fg server, sc scenario) (steps []played, crossed bool) {
	t.Helper()
	window := cmp.Or(sc.window, time.Minute)
	// Calls start in a new window of a second when less than a quarter
	// of the current one is left: each attempt then rarely crosses one.
	if left := time.Until(time.Now().Truncate(window).Add(window)); window <= time.Second && left < window/4 {
		time.Sleep(left)
	}
	first := time.Now().Truncate(window)
	for _, st := range sc.steps {
		if st.write != nil {
			writeRules(t, ref.rules, st.write)
			writeRules(t, fg.rules, st.write)
			steps = append(steps, played{step: st, reference: ref.waitRules(t, st), floodgate: fg.waitRules(t, st)})
			continue
		}
		if st.load != nil {
			ref.loadRules(t, st.load)
			fg.loadRules(t, st.load)
			steps = append(steps, played{step: st})
			continue
		}
		if st.storeDown {
			ref.redis.Stop()
			fg.redis.Stop()
		}
		answer := ref.call(t, st)
		ref.settle(t)
		steps = append(steps, played{step: st, reference: answer, floodgate: fg.call(t, st)})
	}
	return steps, !time.Now().Truncate(window).Equal(first)
}

// check compares the answers step by step, those of a reference built at
// the time built (zero when unknown: the newest), which decides which
// documented differences hold.
func check(t *testing.T, sc scenario, steps []played, built time.Time) {
	t.Helper()
	for i, p := range steps {
		diffs := p.reference.diff(p.floodgate, sc.ignore)
		var want []string
		if p.differs.holdsFor(built) {
			want = p.differs.fields
		}
		if got := fieldsOf(diffs); !slices.Equal(got, want) {
			t.Errorf("step %d %q: %s\n  reference: %s\n  floodgate: %s\n  differ in %q%s; want %q%s",
				i, p.name, p.describe(), p.reference, p.floodgate, got, details(diffs), want, p.differs)
		}
	}
}

// holdsFor reports whether d is a difference from the reference built at
// the time built (zero: the newest); false for nil.
func (d *documented) holdsFor(built time.Time) bool {
	return d != nil && !d.since.after(built) && (d.before == nil || d.before.after(built))
}

func (d *documented) String() string {
	if d == nil {
		return ""
	}
	return " (docs/migrating.md: " + d.row + ")"
}

// change is a change of the reference's that altered its answers.
type change struct {
	commit string
	date   time.Time
	why    string
}

// after reports whether c is a change made after the reference built at
// the time built; a zero time is the newest reference, and a nil change
// none.
func (c *change) after(built time.Time) bool {
	return c != nil && !built.IsZero() && built.Before(c.date)
}

func (c *change) String() string {
	return fmt.Sprintf("%s of %s", c.commit, c.date.Format(time.DateOnly))
}

// pseudoTime is the commit time in a Go pseudo-version
// (v1.4.1-0.20260122083618-3fb702589d36).
var pseudoTime = regexp.MustCompile(`[.-](\d{14})-[0-9a-f]{12}$`)

// builtAt is the time of the reference's commit, from the module version
// go install stamps in the binary. A binary built from a checkout carries
// no such version: the error says so, and the time is zero.
func builtAt(bin string) (time.Time, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return time.Time{}, fmt.Errorf("the reference's version: %w", err)
	}
	m := pseudoTime.FindStringSubmatch(info.Main.Version)
	if m == nil {
		return time.Time{}, fmt.Errorf("the reference's version %q has no commit time", info.Main.Version)
	}
	return time.Parse("20060102150405", m[1])
}
