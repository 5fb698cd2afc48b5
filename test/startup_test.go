package test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// deadRedis returns a stopped redis-server: its port refuses connections
// until the test calls Restart.
func deadRedis(t *testing.T) *redistest.Server {
	t.Helper()
	r := redistest.Start(t)
	r.Stop()
	return r
}

// TestStartWithRedisDown: floodgate starts while Redis is down, as the
// reference server does not (it exits, and Kubernetes restarts it until
// Redis answers). Without a single request, the failure is logged at error
// level with its cause, /rlconfig says the store is unhealthy and why,
// floodgate_store_healthy is 0, and readiness is NOT_SERVING (a wrong
// address stalls a rolling deploy); requests get the failure policy's
// answer; once Redis is up, health follows within seconds, still without
// a request, readiness turns SERVING, and requests are decided by their
// limits again.
func TestStartWithRedisDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	redis := deadRedis(t)
	p := start(t, options{unready: true, args: []string{"-config", dir, "-redis", redis.Addr}})

	checkUnhealthy(t, p, "connection refused")
	if got := summary(p.mustCall(request("e2e", desc("user", "down")))); got != "OK OK:-" {
		t.Errorf("a request while Redis is down: %q, want the failure policy's allow", got)
	}

	redis.Restart()
	eventually(t, 5*time.Second, func() string {
		if v := p.metric("floodgate_store_healthy"); v != 1 {
			return fmt.Sprintf("floodgate_store_healthy %v after Redis came up", v)
		}
		return ""
	})
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "store: redis healthy (breaker closed; last failure") {
		t.Errorf("/rlconfig after recovery:\n%s", grepLines(body, "store:"))
	}
	if !strings.Contains(p.Logs.String(), "Redis answers again") {
		t.Errorf("no log line says Redis is back:\n%s", p.Logs)
	}
	eventually(t, 2*time.Second, func() string {
		if code, body := p.httpGet("/healthcheck"); code != http.StatusOK {
			return fmt.Sprintf("/healthcheck %d %q after Redis came up", code, body)
		}
		return ""
	})
	if got := summary(p.mustCall(request("e2e", desc("user", "up")))); got != "OK OK:2" {
		t.Errorf("a request after recovery: %q, want a decision by the limit", got)
	}
}

// TestHealthRequiresStore: with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true
// (the reference server's switch for health that follows Redis),
// /healthcheck fails from the start while Redis is down, so a Kubernetes
// readiness probe keeps the pod out of the Service, and turns OK when Redis
// answers.
func TestHealthRequiresStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	redis := deadRedis(t)
	p := start(t, options{unready: true, args: []string{"-config", dir},
		env: []string{"REDIS_URL=" + redis.Addr, "REDIS_SOCKET_TYPE=tcp", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"}})
	if code, body := p.httpGet("/healthcheck"); code != http.StatusInternalServerError {
		t.Fatalf("/healthcheck with Redis down: %d %q, want 500", code, body)
	}
	checkUnhealthy(t, p, "connection refused")
	redis.Restart()
	eventually(t, 5*time.Second, func() string {
		if code, body := p.httpGet("/healthcheck"); code != http.StatusOK {
			return fmt.Sprintf("/healthcheck %d %q after Redis came up", code, body)
		}
		return ""
	})
}

// TestStartMisconfigured: settings that cannot work stop the start with
// exit code 2 and a message naming the setting, before any port opens.
func TestStartMisconfigured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"an unreadable Redis CA", []string{"REDIS_URL=127.0.0.1:1", "REDIS_TLS=true", "REDIS_TLS_CACERT=/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"a client certificate without its key", []string{"REDIS_URL=127.0.0.1:1", "REDIS_TLS=true", "REDIS_TLS_CLIENT_CERT=/c.pem"}, "both or neither"},
		{"Redis TLS files without TLS", []string{"REDIS_URL=127.0.0.1:1", "REDIS_TLS_CACERT=/ca.pem"}, "REDIS_TLS=true"},
		{"statsd and DogStatsD at once", []string{"USE_STATSD=true", "USE_DOG_STATSD=true"}, "USE_DOG_STATSD=true: USE_STATSD and USE_DOG_STATSD are both true"},
		{"the per-second Redis without its URL", []string{"REDIS_URL=127.0.0.1:1", "REDIS_PERSECOND=true"}, "REDIS_PERSECOND=true: REDIS_PERSECOND_URL is not set"},
		{"the per-second Redis without the main one", []string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_URL=127.0.0.1:2"}, "needs -redis (REDIS_URL)"},
		{"a Redis setting without REDIS_URL", []string{"REDIS_TLS=true"}, "REDIS_TLS is set but REDIS_URL is not"},
		{"an unreadable xDS CA", []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/nonexistent/xds-ca.pem"}, "/nonexistent/xds-ca.pem"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, append(tc.env, "FLOODGATE_CONFIG="+dir), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", "")
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 and a message containing %q:\n%s", code, tc.want, out)
			}
		})
	}
}

// checkUnhealthy checks that p reports its store unhealthy for cause
// right after start: an error line in the log, /rlconfig, the metric, and
// health NOT_SERVING because the store has not answered since start.
func checkUnhealthy(t *testing.T, p *proc, cause string) {
	t.Helper()
	errLine := regexp.MustCompile(`level=ERROR msg="Redis cannot be used[^\n]*` + regexp.QuoteMeta(cause))
	if !errLine.MatchString(p.Logs.String()) {
		t.Errorf("no error-level line at start naming %q:\n%s", cause, p.Logs)
	}
	_, body := p.httpGet("/rlconfig")
	if line := grepLines(body, "store:"); !strings.Contains(line, "store: redis unhealthy, not reached since start (breaker open; last failure") || !strings.Contains(line, cause) {
		t.Errorf("/rlconfig does not show the store unhealthy because of %q:\n%s", cause, line)
	}
	if line := grepLines(body, "health:"); line != "health: NOT_SERVING: store redis has not answered since start; readiness waits until it has" {
		t.Errorf("/rlconfig does not say why health is NOT_SERVING:\n%s", line)
	}
	if code, body := p.httpGet("/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck before Redis ever answered: %d %q, want 500", code, body)
	}
	if v := p.metric("floodgate_store_healthy"); v != 0 {
		t.Errorf("floodgate_store_healthy = %v before any request, want 0", v)
	}
}
