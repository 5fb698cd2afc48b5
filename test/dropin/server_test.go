package dropin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/statsdtest"
)

// server is one of the two, started for a test, with the statsd server
// it sends to when the scenario has one.
type server struct {
	*harness.Floodgate
	stats *statsdtest.Server
	rules string // the rule directory
	// memcached is the reference's Memcached, nil otherwise: see settle.
	memcached *memcachedtest.Server
	// redis is the single Redis of a server on one, for storeDown.
	redis *redistest.Server
	// conns are the gRPC connections by the client certificate they
	// present (step.as); without TLS, the harness's alone, as "".
	conns map[string]*grpc.ClientConn
	// prometheus is the URL of its stats for Prometheus, when the
	// scenario has them.
	prometheus string
}

// startServer runs bin (floodgate's binary when "") on the scenario's
// rules, under RUNTIME_ROOT, with a store of its own.
func startServer(t *testing.T, bin string, sc scenario) server {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRules(t, dir, sc.files)
	env, memcached, redis := startStore(t, root, sc.store)
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
	var prometheus string
	if sc.prometheus != noPrometheus {
		var vars []string
		prometheus, vars = sc.prometheus.vars(t)
		env = append(env, vars...)
	}
	// Last, so that a scenario's variables win (USE_STATSD=false for
	// DogStatsD).
	env = append(env, sc.env...)
	env = slices.DeleteFunc(env, func(v string) bool {
		name, _, _ := strings.Cut(v, "=")
		return slices.Contains(sc.unset, name)
	})
	// The reference's /healthcheck fails for as long as it runs on
	// Memcached (docs/migrating.md, BACKEND_TYPE): any answer will do.
	reference := bin != ""
	f := harness.Start(t, harness.Options{Bin: bin, Env: env, EnvAddrs: true, Unready: sc.store == memcache && reference})
	if !reference {
		memcached = nil
	}
	conns := map[string]*grpc.ClientConn{"": f.Conn}
	if sc.certs != nil {
		conns = sc.certs.dial(t, f.GRPCAddr)
	}
	return server{Floodgate: f, stats: stats, rules: dir, memcached: memcached, redis: redis, conns: conns, prometheus: prometheus}
}

// store is where a server keeps its counters.
type store int

const (
	redis    store = iota // a single Redis
	cluster               // a Redis Cluster of three masters (REDIS_TYPE=cluster)
	sentinel              // a Redis found through a Sentinel (REDIS_TYPE=sentinel)
	memcache              // a Memcached (BACKEND_TYPE=memcache)
)

// startStore starts a store of kind for one server and returns the
// reference's variables that reach it, with the rules under root, and
// the store when it is a Memcached or a single Redis.
func startStore(t *testing.T, root string, kind store) ([]string, *memcachedtest.Server, *redistest.Server) {
	t.Helper()
	switch kind {
	case cluster:
		c := redistest.StartCluster(t, 3, 0)
		return append(harness.ReferenceVars(root, strings.Join(c.Addrs, ",")), "REDIS_TYPE=cluster"), nil, nil
	case sentinel:
		g := redistest.StartSentinel(t, 0, 1, time.Second)
		url := redistest.SentinelMasterName + "," + g.Sentinels[0].Addr // the reference's form
		return append(harness.ReferenceVars(root, url), "REDIS_TYPE=sentinel"), nil, nil
	case memcache:
		m := memcachedtest.Start(t)
		return append(harness.ReferenceVars(root, ""), "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+m.Addr), m, nil
	}
	r := redistest.Start(t)
	return harness.ReferenceVars(root, r.Addr), nil, r
}

// settle waits until the reference on Memcached has charged what it
// answered: it answers first and increments after, in the background, so
// a call made at once may read a count without the call before. Every key
// it reads (cmd_get) it then increments (incr_hits), or, when the key is
// new (incr_misses), adds (cmd_set). On Redis, and for floodgate, there is
// nothing to wait for.
func (s server) settle(t *testing.T) {
	t.Helper()
	if s.memcached == nil {
		return
	}
	var stat map[string]int64
	poll(t, "the reference's increments on Memcached", func() bool {
		reply, err := s.memcached.Do("stats")
		if err != nil {
			t.Fatalf("memcached stats: %v", err)
		}
		stat = memcachedStats(reply)
		return stat["incr_hits"]+stat["cmd_set"] >= stat["cmd_get"] && stat["cmd_set"] >= stat["incr_misses"]
	}, func() string { return fmt.Sprint(stat) })
}

// poll calls done until it reports true, and fails t with what and the
// state state tells once 10 s have passed first.
func poll(t *testing.T, what string, done func() bool, state func() string) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); !done(); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s: %s", what, state())
		}
	}
}

// memcachedStats reads the numbers of a stats reply ("STAT name value"
// lines).
func memcachedStats(reply string) map[string]int64 {
	out := map[string]int64{}
	for line := range strings.SplitSeq(reply, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "STAT" {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				out[f[1]] = n
			}
		}
	}
	return out
}

// symlinkTo starts the text of a rule file that writeRules makes a
// symbolic link to the rest of the text.
const symlinkTo = "symlink:"

// writeRules writes rule files into dir, by name ("" removes one; a text
// starting with symlinkTo makes a link).
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
		var err error
		if target, ok := strings.CutPrefix(text, symlinkTo); ok {
			err = os.Symlink(target, path)
		} else {
			err = os.WriteFile(path, []byte(text), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// loadRules adds rule files as step.load says, and waits until the debug
// port's /rlconfig lists a rule of each file's domain (its first line,
// "domain: …").
func (s server) loadRules(t *testing.T, files map[string]string) {
	t.Helper()
	staging := filepath.Dir(filepath.Dir(s.rules)) // the root, beside the rule directory
	for name, text := range files {
		tmp := filepath.Join(staging, name)
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(s.rules, name)); err != nil {
			t.Fatal(err)
		}
	}
	var body string
	poll(t, s.Name()+": the rules added listed by /rlconfig", func() bool {
		body = s.debugGet(t, "/rlconfig")
		for _, text := range files {
			domain, _, _ := strings.Cut(strings.TrimPrefix(text, "domain: "), "\n")
			if !strings.Contains("\n"+body, "\n"+domain+".") {
				return false
			}
		}
		return true
	}, func() string { return body })
}

// debugGet returns the body of a GET of path on the debug port.
func (s server) debugGet(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + s.DebugAddr + path)
	if err != nil {
		t.Fatalf("GET %s on the debug port: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitRules sends the step's request until it is answered with a limit,
// which it is once the rules the step wrote are in force, and returns
// that answer. Both servers reload within a second.
func (s server) waitRules(t *testing.T, st step) answer {
	t.Helper()
	var a answer
	poll(t, s.Name()+": the rules written in force", func() bool {
		a = s.call(t, st)
		body, _ := a.body.(map[string]any)
		statuses, _ := body["statuses"].([]any)
		if len(statuses) == 0 {
			return false
		}
		first, _ := statuses[0].(map[string]any)
		return first["currentLimit"] != nil
	}, func() string { return a.String() }) // the last answer, not the first
	return a
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
		resp, err := pb.NewRateLimitServiceClient(s.conns[st.as]).ShouldRateLimit(ctx, st.req)
		if err != nil {
			return grpcError(err)
		}
		return answer{code: codes.OK.String(), body: decodeProto(t, resp)}
	case st.health != nil:
		resp, err := healthpb.NewHealthClient(s.conns[st.as]).Check(ctx, &healthpb.HealthCheckRequest{Service: *st.health})
		if err != nil {
			return grpcError(err)
		}
		return answer{code: codes.OK.String(), body: resp.Status.String()}
	}
	if st.get != "" {
		return s.httpCall(ctx, t, http.MethodGet, st.get, "")
	}
	return s.httpCall(ctx, t, http.MethodPost, "/json", st.json)
}

// httpCall is a call to the HTTP port: its status and its body, as JSON
// decodes it when it is JSON.
func (s server) httpCall(ctx context.Context, t *testing.T, method, path, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.HTTPAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	var v any = string(b)
	var decoded any
	if json.Unmarshal(b, &decoded) == nil {
		v = decoded
	}
	return answer{code: strconv.Itoa(resp.StatusCode), body: v}
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
	case st.get != "":
		return "GET " + st.get
	case st.load != nil:
		return fmt.Sprintf("rules %q added, then /rlconfig read until it lists them", slices.Sorted(maps.Keys(st.load)))
	}
	return "POST /json " + st.json
}
