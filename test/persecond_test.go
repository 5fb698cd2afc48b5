package test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testcert"
)

// perSecondRules have limits of both kinds: second (and 50 s, a window of
// seconds too) for the per-second Redis, minute for the main one. The
// sliding logs never roll over during the test, so their counts are exact.
const perSecondRules = `domain: ps
descriptors:
  - key: second
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: burst
    rate_limit: {unit: second, unit_multiplier: 50, requests_per_unit: 2, algorithm: sliding_log}
  - key: quota
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_log}
`

// TestPerSecondRedis starts floodgate with the reference server's
// variables for a per-second Redis and checks where the counters land,
// that a request spanning both Redis is all or nothing, that the deny
// cache answers over them, and that /rlconfig follows both.
func TestPerSecondRedis(t *testing.T) {
	main, ps := redistest.Start(t), redistest.Start(t)
	root := t.TempDir()
	writeRules(t, filepath.Join(root, "config"), map[string]string{"ps.yaml": perSecondRules})
	p := start(t, options{envAddrs: true, env: []string{
		"RUNTIME_ROOT=" + root,
		"REDIS_URL=" + main.Addr,
		"REDIS_PERSECOND=true",
		"REDIS_PERSECOND_URL=" + ps.Addr,
		"REDIS_PERSECOND_TYPE=SINGLE",
		"REDIS_PERSECOND_POOL_SIZE=4",
		"REDIS_PERSECOND_TIMEOUT=2s",
		"USE_STATSD=false",
	}})

	t.Run("counters land by window", func(t *testing.T) {
		// A 1 s window's key expires at the window's end: ask again until
		// both keys are seen between a request and its window's end.
		eventually(t, 5*time.Second, func() string {
			if s := summary(p.mustCall(request("ps", desc("second", "a"), desc("minute", "a")))); !decided.MatchString(s) {
				return "answer " + s
			}
			mainKeys, psKeys := redisKeys(t, main), redisKeys(t, ps)
			if !hasCounter(mainKeys, "minute") || hasCounter(mainKeys, "second") {
				return fmt.Sprintf("main Redis holds %q, want the minute counter only", mainKeys)
			}
			if !hasCounter(psKeys, "second") || hasCounter(psKeys, "minute") {
				return fmt.Sprintf("per-second Redis holds %q, want the second counter only", psKeys)
			}
			return ""
		})
	})

	t.Run("a request on both is all or nothing", func(t *testing.T) {
		for i, want := range []string{"OK OK:1", "OK OK:0"} {
			if got := summary(p.mustCall(request("ps", desc("burst", "x")))); got != want {
				t.Fatalf("burst %d: %s, want %s", i, got, want)
			}
		}
		// The per-second Redis denies; the main one took its hit and gave
		// it back, so the quota still shows all 100.
		if got := summary(p.mustCall(request("ps", desc("quota", "x"), desc("burst", "x")))); got != "OVER OK:100 OVER:0" {
			t.Fatalf("quota and burst: %s, want OVER OK:100 OVER:0", got)
		}
		if got := summary(p.mustCall(request("ps", desc("quota", "x")))); got != "OK OK:99" {
			t.Fatalf("quota alone after the denied request: %s, want OK OK:99", got)
		}
		if k := redisKeys(t, ps); !hasCounter(k, "burst") || hasCounter(k, "quota") {
			t.Errorf("per-second Redis holds %q", k)
		}
		if k := redisKeys(t, main); !hasCounter(k, "quota") || hasCounter(k, "burst") {
			t.Errorf("main Redis holds %q", k)
		}
	})

	t.Run("the deny cache answers over both", func(t *testing.T) {
		before := p.metric("floodgate_deny_cache_answers_total")
		for range 5 {
			if got := summary(p.mustCall(request("ps", desc("burst", "x")))); got != "OVER OVER:0" {
				t.Fatalf("burst: %s, want OVER OVER:0", got)
			}
		}
		if answered := p.metric("floodgate_deny_cache_answers_total") - before; answered < 4 {
			t.Errorf("%v of 5 repeated denials answered from the deny cache, want at least 4", answered)
		}
	})

	t.Run("/rlconfig shows both", func(t *testing.T) {
		_, body := p.httpGet("/rlconfig")
		want := fmt.Sprintf("store: redis healthy (main %s: breaker closed; per-second %s: breaker closed)", main.Addr, ps.Addr)
		if !strings.Contains(body, want) {
			t.Errorf("/rlconfig lacks %q:\n%s", want, body)
		}
	})

	t.Run("the per-second Redis down", func(t *testing.T) {
		ps.Stop()
		// Requests on the per-second limits are answered by the failure
		// policy (allow: no limit in the status), and open the breaker;
		// those on the main Redis are decided all along.
		eventually(t, 10*time.Second, func() string {
			if s := summary(p.mustCall(request("ps", desc("second", "down")))); s != "OK OK:-" {
				return "second limit answered " + s + ": want the failure policy's OK"
			}
			if s := summary(p.mustCall(request("ps", desc("minute", "down")))); !decided.MatchString(s) {
				return "minute limit answered " + s + ": want it decided by the main Redis"
			}
			_, body := p.httpGet("/rlconfig")
			if want := fmt.Sprintf("store: redis unhealthy (main %s: breaker closed; per-second %s: breaker open", main.Addr, ps.Addr); !strings.Contains(body, want) {
				return "/rlconfig lacks " + want + ":\n" + body
			}
			return ""
		})
		if got := p.metric("floodgate_store_healthy"); got != 0 {
			t.Errorf("floodgate_store_healthy = %v, want 0", got)
		}
		eventually(t, 5*time.Second, func() string {
			if !regexp.MustCompile(`level=ERROR msg="Redis fails[^\n]* redis=per-second addr=` + regexp.QuoteMeta(ps.Addr)).MatchString(p.Logs.String()) {
				return "no error line names the per-second Redis:\n" + p.Logs.String()
			}
			return ""
		})
	})
}

// TestPerSecondRedisTLS: the per-second Redis over TLS, verified with the
// main Redis's TLS files (REDIS_TLS_CACERT and the client certificate, as
// the reference shares them), while the main Redis stays plain.
func TestPerSecondRedisTLS(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"ps.yaml": perSecondRules})
	ca, clientCA := testcert.NewCA(t, "redis CA"), testcert.NewCA(t, "clients CA")
	certFile, keyFile := clientCA.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")
	main, ps := redistest.Start(t), redistest.StartTLS(t, &redistest.TLS{CA: ca, ClientCA: clientCA})
	p := start(t, options{env: []string{
		"FLOODGATE_CONFIG=" + dir,
		"REDIS_URL=" + main.Addr,
		"REDIS_PERSECOND=true",
		"REDIS_PERSECOND_URL=" + ps.TLSAddr,
		"REDIS_PERSECOND_TLS=true",
		"REDIS_TLS_CACERT=" + ca.WriteCA(t, dir, "ca"),
		"REDIS_TLS_CLIENT_CERT=" + certFile,
		"REDIS_TLS_CLIENT_KEY=" + keyFile,
	}})
	eventually(t, 5*time.Second, func() string {
		if s := summary(p.mustCall(request("ps", desc("second", "tls"), desc("minute", "tls")))); !decided.MatchString(s) {
			return "answer " + s
		}
		if !hasCounter(redisKeys(t, ps), "second") || !hasCounter(redisKeys(t, main), "minute") {
			return fmt.Sprintf("main Redis holds %q, per-second %q", redisKeys(t, main), redisKeys(t, ps))
		}
		return ""
	})
	if v := p.metric("floodgate_store_healthy"); v != 1 || strings.Contains(p.Logs.String(), "level=ERROR") {
		t.Errorf("floodgate_store_healthy = %v; logs:\n%s", v, p.Logs)
	}
}

// decided matches the summary of an allowed request whose every status
// carries a limit: decided by a store, not by the failure policy.
var decided = regexp.MustCompile(`^OK( OK:\d+)+$`)

// redisKeys returns every key of a Redis.
func redisKeys(t *testing.T, r *redistest.Server) []string {
	t.Helper()
	out, err := r.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// hasCounter reports whether a key of keys counts for the descriptor key.
func hasCounter(keys []string, descriptorKey string) bool {
	for _, k := range keys {
		if strings.Contains(k, descriptorKey+"=") {
			return true
		}
	}
	return false
}
