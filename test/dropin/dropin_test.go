// Package dropin runs floodgate beside the reference server
// (envoyproxy/ratelimit) to check that it is a drop-in: both read the same
// rule files under the same variables, each with a Redis of its own, and
// get the same calls in the same order; every answer must be the same,
// field by field, except where a step names the documented difference it
// shows (docs/migrating.md), and then it must differ, so that the list of
// differences stays true as either server changes.
//
// The reference is the binary Find gives for harness.Reference: `make
// test` builds the newest version the Go module proxy serves
// (REFERENCE_VERSION in the Makefile). What that version lacks is not
// checked here: rule metadata, wildcards inside a value, Envoy's API after
// 1.37.
package dropin

import (
	"cmp"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// TestMain removes the floodgate binary the harness builds.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}

// step is one call, made to both servers.
type step struct {
	name string
	// One of: a ShouldRateLimit; the body of a POST to /json; a gRPC
	// health check of the service named; rule files to write (by name,
	// "" to remove one), after which req is sent until both servers
	// answer it with a limit: the new rules are in force.
	req    *pb.RateLimitRequest
	json   string
	health *string
	write  map[string]string
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
	// reference built before it must give floodgate's answer.
	since *change
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
	// since is the reference's change whose answers floodgate follows
	// here: a reference built before it is not compared.
	since *change
	// window is the shortest window of the scenario's rules: its calls
	// are played again when they cross one of its boundaries. Zero
	// means a minute.
	window time.Duration
	// cluster puts each server's counters in a Redis Cluster of its own
	// (REDIS_TYPE=cluster), three masters.
	cluster bool
	// perSecond gives each server a second Redis for its limits of a
	// second (REDIS_PERSECOND).
	perSecond bool
	// xds, when set, are the rules: both servers take them from one xDS
	// management server (CONFIG_TYPE=GRPC_XDS_SOTW), as from Envoy
	// Gateway, instead of files.
	xds []types.Resource
	// memcache puts each server's counters in a Memcached of its own
	// (BACKEND_TYPE=memcache) instead of Redis.
	memcache bool
	// statsd has both servers send statsd, and compares the counters of
	// every rule (ratelimit.service.rate_limit.*) once the calls are made.
	statsd bool
}

// TestSameAnswers plays every scenario on both servers.
func TestSameAnswers(t *testing.T) {
	reference := harness.Require(t, harness.Reference)
	built, err := builtAt(reference)
	if err != nil {
		t.Logf("%v: compared as the newest", err)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if sc.since.after(built) {
				t.Skipf("the reference (%s) was built before %s: %s", built.Format(time.DateOnly), sc.since, sc.since.why)
			}
			// A scenario that crosses a boundary of its windows may
			// see them restart between the two servers' answers to
			// one step: it is played again, on new servers.
			for attempt := 1; ; attempt++ {
				sc := withXDS(t, sc)
				ref, fg := startServer(t, reference, sc), startServer(t, "", sc)
				steps, crossed := play(t, ref, fg, sc)
				if !crossed || attempt == 3 {
					check(t, sc, steps, built)
					if sc.statsd {
						checkStats(t, ref, fg)
					}
					return
				}
				t.Logf("attempt %d crossed a window's boundary: again", attempt)
			}
		})
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
	first := time.Now().Truncate(window)
	for _, st := range sc.steps {
		if st.write != nil {
			writeRules(t, ref.rules, st.write)
			writeRules(t, fg.rules, st.write)
			steps = append(steps, played{step: st, reference: ref.waitRules(t, st), floodgate: fg.waitRules(t, st)})
			continue
		}
		steps = append(steps, played{step: st, reference: ref.call(t, st), floodgate: fg.call(t, st)})
	}
	return steps, !time.Now().Truncate(window).Equal(first)
}

// check compares the answers step by step, those of a reference built at
// the time built (zero when unknown: the newest).
func check(t *testing.T, sc scenario, steps []played, built time.Time) {
	t.Helper()
	for i, p := range steps {
		diffs := p.reference.diff(p.floodgate, sc.ignore)
		var want []string
		if p.differs != nil && !p.differs.since.after(built) {
			want = p.differs.fields
		}
		if got := fieldsOf(diffs); !slices.Equal(got, want) {
			t.Errorf("step %d %q: %s\n  reference: %s\n  floodgate: %s\n  differ in %q%s; want %q%s",
				i, p.name, p.describe(), p.reference, p.floodgate, got, details(diffs), want, p.differs)
		}
	}
}

// server is one of the two, started for a test, with the statsd server
// it sends to when the scenario has one.
type server struct {
	*harness.Floodgate
	stats *statsdtest.Server
	rules string // the rule directory
}

// startServer runs bin (floodgate's binary when "") on the scenario's
// rules, under RUNTIME_ROOT, with a Redis of its own.
func startServer(t *testing.T, bin string, sc scenario) server {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRules(t, dir, sc.files)
	var env []string
	if sc.memcache {
		env = append(harness.ReferenceVars(root, ""), "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+memcachedtest.Start(t).Addr)
	} else if sc.cluster {
		c := redistest.StartCluster(t, 3, 0)
		env = append(harness.ReferenceVars(root, strings.Join(c.Addrs, ",")), "REDIS_TYPE=cluster")
	} else {
		env = harness.ReferenceVars(root, redistest.Start(t).Addr)
	}
	if sc.perSecond {
		env = append(env, "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+redistest.Start(t).Addr)
	}
	var stats *statsdtest.Server
	if sc.statsd {
		stats = statsdtest.Listen(t)
		host, port, _ := net.SplitHostPort(stats.Addr())
		env = append(env, "USE_STATSD=true", "STATSD_PROTOCOL=udp", "STATSD_HOST="+host, "STATSD_PORT="+port,
			"STATS_FLUSH_INTERVAL="+statsFlush.String())
	}
	// Last, so that a scenario's variables win (USE_STATSD=false for
	// DogStatsD).
	env = append(env, sc.env...)
	// The reference's /healthcheck fails for as long as it runs on
	// Memcached (docs/migrating.md, BACKEND_TYPE): any answer will do.
	unready := sc.memcache && bin != ""
	return server{harness.Start(t, harness.Options{Bin: bin, Env: env, EnvAddrs: true, Unready: unready}), stats, dir}
}

// writeRules writes rule files into dir, by name ("" removes one).
func writeRules(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if text == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRules sends the step's request until it is answered with a limit,
// which it is once the rules the step wrote are in force, and returns
// that answer. Both servers reload within a second.
func (s server) waitRules(t *testing.T, st step) answer {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := s.call(t, st)
		if body, ok := a.body.(map[string]any); ok {
			if statuses, ok := body["statuses"].([]any); ok && len(statuses) > 0 {
				if first, ok := statuses[0].(map[string]any); ok && first["currentLimit"] != nil {
					return a
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the rules written are not in force after 10 s: %s", s.Name(), a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// answer is a server's answer: a gRPC status code or HTTP status, the
// error's message, and the body as JSON decodes it (protojson for gRPC).
type answer struct {
	code string
	msg  string
	body any
}

func (a answer) String() string {
	b, _ := json.Marshal(a.body)
	s := a.code
	if a.msg != "" {
		s += " " + strconv.Quote(a.msg)
	}
	if a.body != nil {
		s += " " + string(b)
	}
	return s
}

// call makes the step's call.
func (s server) call(t *testing.T, st step) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case st.req != nil:
		resp, err := s.RLS.ShouldRateLimit(ctx, st.req)
		if err != nil {
			return grpcError(err)
		}
		return answer{code: codes.OK.String(), body: decodeProto(t, resp)}
	case st.health != nil:
		resp, err := healthpb.NewHealthClient(s.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: *st.health})
		if err != nil {
			return grpcError(err)
		}
		return answer{code: codes.OK.String(), body: resp.Status.String()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.HTTPAddr+"/json", strings.NewReader(st.json))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /json: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /json: %v", err)
	}
	var body any = string(b)
	var v any
	if json.Unmarshal(b, &v) == nil {
		body = v
	}
	return answer{code: strconv.Itoa(resp.StatusCode), body: body}
}

// grpcError is the answer of a call that failed: its code and message.
// The messages are shown, not compared: only the codes must agree.
func grpcError(err error) answer {
	st := status.Convert(err)
	return answer{code: st.Code().String(), msg: st.Message()}
}

// decodeProto is m as JSON decodes protojson's text.
func decodeProto(t *testing.T, m proto.Message) any {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// describe is the step's call, for a failure's message.
func (st step) describe() string {
	switch {
	case st.req != nil:
		b, _ := protojson.Marshal(st.req)
		return "ShouldRateLimit " + string(b)
	case st.health != nil:
		return "Health.Check " + strconv.Quote(*st.health)
	case st.write != nil:
		b, _ := protojson.Marshal(st.req)
		return fmt.Sprintf("rules %q written, then ShouldRateLimit %s until it has a limit", slices.Sorted(maps.Keys(st.write)), b)
	}
	return "POST /json " + st.json
}

// difference is a field where two answers differ, by its path ("code"
// for the status code), with both values.
type difference struct{ field, reference, floodgate string }

// fieldsOf lists the differences' fields, in order.
func fieldsOf(diffs []difference) []string {
	var out []string
	for _, d := range diffs {
		out = append(out, d.field)
	}
	return out
}

// details is the values of the differences, for a failure's message.
func details(diffs []difference) string {
	var b strings.Builder
	for _, d := range diffs {
		fmt.Fprintf(&b, "\n    %s: %s, %s", d.field, d.reference, d.floodgate)
	}
	return b.String()
}

// diff lists where b differs from a: the status code, then each field of
// the bodies by its path. A time left in a window (duration_until_reset,
// a reset header) may differ by a second: the servers read the clock a
// moment apart.
func (a answer) diff(b answer, ignore []string) []difference {
	var out []difference
	if a.code != b.code {
		out = append(out, difference{"code", a.code, b.code})
	}
	diffValue("", a.body, b.body, ignore, &out)
	return out
}

func diffValue(path string, a, b any, ignore []string, out *[]difference) {
	switch {
	case reflect.DeepEqual(a, b) || slices.Contains(ignore, path):
		return
	case strings.HasSuffix(path, "durationUntilReset") && withinSecond(strings.TrimSuffix(fmt.Sprint(a), "s"), strings.TrimSuffix(fmt.Sprint(b), "s")):
		return
	}
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	if aMap && bMap {
		if isResetHeader(am) && am["key"] == bm["key"] && withinSecond(fmt.Sprint(am["value"]), fmt.Sprint(bm["value"])) {
			return
		}
		for _, k := range keys(am, bm) {
			diffValue(path+"."+k, am[k], bm[k], ignore, out)
		}
		return
	}
	al, aList := a.([]any)
	bl, bList := b.([]any)
	if aList && bList && len(al) == len(bl) {
		for i := range al {
			diffValue(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], ignore, out)
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	*out = append(*out, difference{path, string(ja), string(jb)})
}

// isResetHeader reports whether a header entry of an answer
// ({key, value}) tells the seconds to a window's reset.
func isResetHeader(m map[string]any) bool {
	k, ok := m["key"].(string)
	return ok && strings.Contains(strings.ToLower(k), "reset")
}

// withinSecond reports whether a and b are numbers at most 1 apart.
func withinSecond(a, b string) bool {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && x-y <= 1 && y-x <= 1
}

// keys are the keys of a and b, sorted.
func keys[V any](a, b map[string]V) []string {
	both := maps.Clone(a)
	maps.Copy(both, b)
	return slices.Sorted(maps.Keys(both))
}

// Requests, tersely.

// d is a descriptor of the entries key, value, key, value….
func d(kv ...string) *rlv3.RateLimitDescriptor {
	desc := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return desc
}

// req is a ShouldRateLimit of domain.
func req(domain string, descs ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// rep is n steps of the same call, named name #1…#n.
func rep(n int, name string, r *pb.RateLimitRequest) []step {
	steps := make([]step, n)
	for i := range steps {
		steps[i] = step{name: fmt.Sprintf("%s #%d", name, i+1), req: r}
	}
	return steps
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
