package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// A Redis never reached is unhealthy on /metrics and /rlconfig from the
// program's first answer.
func TestUnreachableRedisThroughTheProgram(t *testing.T) {
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
	if r := get(t, "GET", "http://"+httpAddr+"/rlconfig", ""); !strings.Contains(r, "store: redis unhealthy, not reached since start (breaker ") {
		t.Errorf("/rlconfig:\n%s", r)
	}
}

// servingHTTP finds the HTTP address in the text log line saying the
// listeners are up.
var servingHTTP = regexp.MustCompile(`msg=serving .*http=(\S+)`)
