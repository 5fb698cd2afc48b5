package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// TestEnvoyGatewayStartOrder starts floodgate and the reference server
// side by side as Envoy Gateway's default Deployment runs them
// (FORCE_START_WITHOUT_INITIAL_CONFIG=true, its probes on /healthcheck)
// before their Redis and their xDS server are reachable, then brings up
// Redis, then the xDS server with rules, and at each step reads what
// Envoy Gateway sees: the probes' answer, which decides whether the pod
// gets traffic, and the answer to a ShouldRateLimit from Envoy.
//
//   - Neither reachable: floodgate runs, not ready (/healthcheck 500), so
//     that the probes keep traffic away; the reference exits (this
//     version; since its b8d893f it opens no port until Redis answers),
//     and Kubernetes restarts it with a growing back-off.
//   - Redis reachable: floodgate is ready within seconds and allows
//     every request until the first rules arrive; the reference (started
//     again, as Kubernetes would) is ready and answers every request with
//     an error, which Envoy turns into a 500 with rateLimit.failClosed,
//     Envoy Gateway's issue 8796.
//   - The xDS server reachable: both take the rules at their next attempt
//     (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, 10 s ±50 %) and decide by them.
func TestEnvoyGatewayStartOrder(t *testing.T) {
	t.Parallel() // beside TestEnvoyGatewayDeployments: both wait on timers
	reference := harness.Require(t, harness.Reference)
	i := slices.IndexFunc(envoyGatewayContainers(t), func(c *egContainer) bool { return slices.Contains(c.files, "default") })
	def := envoyGatewayContainers(t)[i]
	if def.env("FORCE_START_WITHOUT_INITIAL_CONFIG") != "true" {
		t.Fatalf("the default Deployment sets FORCE_START_WITHOUT_INITIAL_CONFIG=%q; this test is about true", def.env("FORCE_START_WITHOUT_INITIAL_CONFIG"))
	}
	if p := def.c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 8080 {
		t.Fatalf("the default Deployment's readiness probe %+v: want an HTTP GET on 8080, the HTTP port", p)
	}
	w := newEGWorld(t, []*egContainer{def})
	xdsAddr := w.xds.Addr
	w.xds.Stop()
	w.redis.Stop()

	fg := w.startNoWait(t, def, harness.Binary(t))
	ref := w.startNoWait(t, def, reference)

	// Neither reachable.
	waitAnswers(t, fg)
	if got := w.seen(t, fg); got != "not ready (/healthcheck 500); ShouldRateLimit OK" {
		t.Errorf("floodgate before Redis and the xDS server: %s", got)
	}
	if !waitExitOrAnswer(t, ref, 15*time.Second) {
		t.Logf("the reference neither exited nor answered /healthcheck in 15 s (a version that waits for Redis with no port open)")
	}
	if got := w.seen(t, ref); !strings.HasPrefix(got, "exited") && !strings.HasPrefix(got, "no port open") {
		t.Errorf("the reference before Redis and the xDS server: %s, want it not running or opening no port", got)
	} else {
		t.Logf("the reference before Redis and the xDS server: %s", got)
	}

	// Redis reachable, the xDS server not.
	w.redis.Restart()
	up := time.Now()
	waitReady(t, fg, 10*time.Second)
	t.Logf("floodgate ready %v after Redis answers", time.Since(up).Round(100*time.Millisecond))
	if got := w.seen(t, fg); got != "ready; ShouldRateLimit OK" {
		t.Errorf("floodgate with Redis, before the xDS server: %s", got)
	}
	if ref.f.Exited() {
		ref = w.startNoWait(t, def, reference) // as Kubernetes restarts it
	}
	waitReady(t, ref, 15*time.Second)
	if got := w.seen(t, ref); !strings.HasPrefix(got, "ready; ShouldRateLimit error ") {
		t.Errorf("the reference with Redis, before the xDS server: %s, want ready and an error", got)
	} else {
		t.Logf("the reference with Redis, before the xDS server: %s", got)
	}

	// The xDS server reachable, with the rules.
	mgmt := xdstest.Start(t, xdsAddr, w.xdsTLS(t))
	mgmt.Set("envoy-ratelimit", "1", envoyGatewayRules(), dashboardRules())
	up = time.Now()
	for name, r := range map[string]*egRun{"floodgate": fg, "the reference": ref} {
		waitRules(t, w, r, 30*time.Second)
		t.Logf("%s decides by the rules %v after the xDS server is reachable", name, time.Since(up).Round(100*time.Millisecond))
		if got := w.seen(t, r); got != "ready; ShouldRateLimit OK by the rules" {
			t.Errorf("%s with both: %s", name, got)
		}
	}
}

// startNoWait starts bin with the container's environment, as start does,
// without waiting for it.
func (w *egWorld) startNoWait(t *testing.T, e *egContainer, bin string) *egRun {
	t.Helper()
	r, err := w.run(t, e, harness.Options{Bin: bin, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.f.Stop(0) })
	return r
}

// seen is what Envoy Gateway sees of a server: whether its probes let
// traffic to it, and its answer to one ShouldRateLimit of Envoy's.
func (w *egWorld) seen(t *testing.T, r *egRun) string {
	t.Helper()
	if r.f.Exited() {
		return fmt.Sprintf("exited (code %d)", r.f.State().ExitCode())
	}
	code, err := probe(r)
	if err != nil {
		return "no port open"
	}
	ready := "ready"
	if code != http.StatusOK {
		ready = fmt.Sprintf("not ready (/healthcheck %d)", code)
	}
	var asked atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.dial(t, r.f.GRPCAddr, &asked).ShouldRateLimit(ctx, egRequest("start-order"))
	switch {
	case err != nil:
		return ready + "; ShouldRateLimit error " + status.Code(err).String() + ": " + status.Convert(err).Message()
	case resp.GetStatuses()[0].GetCurrentLimit() != nil:
		return ready + "; ShouldRateLimit " + resp.GetOverallCode().String() + " by the rules"
	}
	return ready + "; ShouldRateLimit " + resp.GetOverallCode().String()
}

// probe asks what the Deployment's readiness probe asks, on the HTTP
// port (its 8080, moved), which decides whether the pod gets traffic.
func probe(r *egRun) (int, error) {
	resp, err := http.Get("http://" + r.f.HTTPAddr + r.c.ReadinessProbe.HTTPGet.Path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitAnswers waits until the server's /healthcheck answers, whatever it
// says.
func waitAnswers(t *testing.T, r *egRun) {
	t.Helper()
	poll(t, "/healthcheck answers", 15*time.Second, func() bool {
		_, err := probe(r)
		return err == nil
	})
}

// waitReady waits until the server's /healthcheck answers 200.
func waitReady(t *testing.T, r *egRun, timeout time.Duration) {
	t.Helper()
	poll(t, "/healthcheck 200", timeout, func() bool {
		code, err := probe(r)
		return err == nil && code == http.StatusOK
	})
}

// waitExitOrAnswer waits until the process exits or its /healthcheck
// answers, and reports whether either came within timeout.
func waitExitOrAnswer(t *testing.T, r *egRun, timeout time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := probe(r); err == nil || r.f.Exited() {
			return true
		}
	}
	return false
}

// waitRules waits until the server answers Envoy by the pushed rules.
func waitRules(t *testing.T, w *egWorld, r *egRun, timeout time.Duration) {
	t.Helper()
	poll(t, "the pushed rules in force", timeout, func() bool {
		return strings.HasSuffix(w.seen(t, r), "by the rules")
	})
}

// poll calls done until it reports true, failing t with what after
// timeout.
func poll(t *testing.T, what string, timeout time.Duration, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !done(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
	}
}
