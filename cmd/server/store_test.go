package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// countLines counts the lines of logs holding s.
func countLines(logs, s string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitFor polls cond every 10ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// A Redis that dies under an idle instance (no requests) is reported
// within the idle probe interval, in one log line with the cause, and its
// return in one line; reached says whether it ever answered.
func TestStoreWatchIdle(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: srv.Addr, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lim, err := redislimit.New(client, redislimit.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	w := &storeWatch{store: lim, name: "Redis", attrs: []any{"addr", srv.Addr}, logger: newLogOutput(&logs, "text", nil, &redactor{}).logger, timeout: 500 * time.Millisecond}
	if w.Reached() {
		t.Fatal("reached before any probe")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.probe(ctx, time.Second); err != nil || !w.Reached() {
		t.Fatalf("probe %v, reached %v", err, w.Reached())
	}
	const sick, idle = 50 * time.Millisecond, 300 * time.Millisecond
	go w.run(ctx, sick, idle)

	srv.Stop()
	start := time.Now()
	if !waitFor(3*time.Second, func() bool { return !lim.Healthy() }) {
		t.Fatalf("Redis stopped, still healthy after 3s:\n%s", logs.String())
	}
	if took := time.Since(start); took > idle+w.timeout+500*time.Millisecond {
		t.Errorf("reported after %v, want within an idle interval and a probe (%v + %v)", took, idle, w.timeout)
	}
	if !waitFor(time.Second, func() bool { return countLines(logs.String(), "Redis fails") == 1 }) {
		t.Fatalf("want one line saying Redis fails:\n%s", logs.String())
	}
	// The cause: the refused connection, or the probe's deadline while
	// the driver still retries its dials.
	if !regexp.MustCompile(`Redis fails.* err="[^"<]+"`).MatchString(logs.String()) {
		t.Errorf("the line does not give the cause:\n%s", logs.String())
	}

	srv.Restart()
	if !waitFor(3*time.Second, func() bool { return countLines(logs.String(), "Redis answers again") == 1 }) {
		t.Fatalf("want one line saying Redis answers again:\n%s", logs.String())
	}
	// Several probe intervals later, still one line of each.
	time.Sleep(2 * idle)
	out := logs.String()
	if countLines(out, "Redis fails") != 1 || countLines(out, "Redis answers again") != 1 || !lim.Healthy() {
		t.Errorf("want exactly one line per change and Redis healthy:\n%s", out)
	}
}

// openStore opens the store the command line and environment configure,
// its log lines in the returned buffer; it is closed when the test ends.
func openStore(t *testing.T, args []string, env lookupFunc) (*counterStore, *testlog.Buffer) {
	t.Helper()
	cfg, err := settings.Load(args, env)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := newStore(ctx, cfg, newLogOutput(logs, "text", nil, &redactor{}).logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.close)
	return st, logs
}

// A Redis never reached (a port nothing listens on) is unhealthy from the
// first answer of /metrics and /rlconfig, and never reached.
func TestUnreachableRedisAtStart(t *testing.T) {
	st, logs := openStore(t, []string{"-redis", deadAddr(t)}, envOf())
	if h := st.health(); h.Healthy || st.reached() {
		t.Errorf("health %+v, reached %v: want unhealthy and never reached", h, st.reached())
	}
	if countLines(logs.String(), "Redis cannot be used") != 1 {
		t.Errorf("want one line at start:\n%s", logs.String())
	}

	// And through the program: /metrics and /rlconfig from the first answer.
	env := envOf("REDIS_URL", deadAddr(t), "FLOODGATE_CONFIG", "../../config")
	var out testlog.Buffer
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", ""}, env, &out, &out)
	}()
	defer func() { stop(); <-done }()
	var httpAddr string
	if !waitFor(10*time.Second, func() bool {
		m := servingHTTP.FindStringSubmatch(out.String())
		if m != nil {
			httpAddr = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("not serving:\n%s", out.String())
	}
	if m := get(t, "GET", "http://"+httpAddr+"/metrics", ""); !strings.Contains(m, "floodgate_store_healthy 0") {
		t.Errorf("/metrics does not say floodgate_store_healthy 0")
	}
	if r := get(t, "GET", "http://"+httpAddr+"/rlconfig", ""); !strings.Contains(r, "store: redis unhealthy") {
		t.Errorf("/rlconfig:\n%s", r)
	}
}

// servingHTTP finds the HTTP address in the text log line saying the
// listeners are up.
var servingHTTP = regexp.MustCompile(`msg=serving .*http=(\S+)`)

// The start line names the pipeline settings when the reference's
// variables set them, and says they do nothing on Cluster.
func TestPipelineSettingsLogged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		wantNot []string
	}{
		{"set", []string{"REDIS_PIPELINE_WINDOW", "150us", "REDIS_PIPELINE_LIMIT", "8"},
			[]string{"pipeline_window=150µs", "pipeline_limit=8"}, []string{"no effect on Redis Cluster"}},
		{"unset", nil, nil, []string{"pipeline_", "no effect on Redis Cluster"}},
		{"cluster", []string{"REDIS_TYPE", "cluster", "REDIS_PIPELINE_WINDOW", "150us"},
			[]string{"pipeline_window=150µs", "no effect on Redis Cluster"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, logs := openStore(t, nil, envOf(append([]string{"REDIS_URL", deadAddr(t)}, tc.env...)...))
			out := logs.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the start lines do not say %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("the start lines say %q:\n%s", w, out)
				}
			}
		})
	}
}
