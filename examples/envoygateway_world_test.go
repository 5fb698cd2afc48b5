package examples_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// egWorld is what Envoy Gateway's rate-limit Deployment reaches, real and
// on loopback: its certificates (one CA, as its certgen makes them), its
// xDS server over mutual TLS, and the Redis servers the Deployments name.
type egWorld struct {
	ca                      *testcert.CA
	rateLimit, envoy        testcert.Pair // the envoy-rate-limit secret's pair; Envoy's client pair
	redisCA                 *testcert.CA
	redisClient             testcert.Pair // the ratelimit-cert secret's pair
	xdsPair                 testcert.Pair // Envoy Gateway's xDS server's
	xds                     *xdstest.Server
	redis, redisTLS         *redistest.Server
	sentinel                *redistest.Sentinel
	redisTLSAuth, caBundled string
}

// newEGWorld starts what the containers need.
func newEGWorld(t *testing.T, cs []*egContainer) *egWorld {
	t.Helper()
	w := &egWorld{ca: testcert.NewCA(t, "envoy-gateway CA"), redisCA: testcert.NewCA(t, "redis CA")}
	w.rateLimit = w.ca.Issue(t, "envoy-ratelimit", testcert.ServerAndClient, rateLimitServiceName, "127.0.0.1")
	w.envoy = w.ca.Issue(t, "envoy", testcert.Client, "envoy")
	w.redisClient = w.redisCA.Issue(t, "ratelimit", testcert.Client, "ratelimit")
	// Envoy Gateway's xDS server for the rate-limit service asks for the
	// client certificate its certgen issued.
	w.xdsPair = w.ca.Issue(t, "envoy-gateway", testcert.Server, "envoy-gateway", "127.0.0.1")
	w.xds = xdstest.Start(t, "127.0.0.1:0", w.xdsTLS(t))
	w.xds.Set("envoy-ratelimit", "1", envoyGatewayRules(), dashboardRules())
	w.redis = redistest.Start(t)
	for _, c := range cs {
		switch {
		case strings.EqualFold(c.env("REDIS_TYPE"), "sentinel") && w.sentinel == nil:
			w.sentinel = redistest.StartSentinel(t, 0, 1, time.Second)
		case c.env("REDIS_TLS") == "true" && w.redisTLS == nil:
			w.redisTLSAuth = c.env("REDIS_AUTH")
			w.redisTLS = redistest.StartTLS(t, &redistest.TLS{CA: w.redisCA, ClientCA: w.redisCA})
			if w.redisTLSAuth != "" {
				// Set once it is up: the harness's readiness check does
				// not authenticate.
				if _, err := w.redisTLS.Do("CONFIG", "SET", "requirepass", w.redisTLSAuth); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c.env("REDIS_TLS") == "true" && c.env("REDIS_AUTH") != w.redisTLSAuth {
			t.Fatalf("%s: REDIS_AUTH %q, another TLS Deployment's %q: one TLS Redis serves them all", c.name(), c.env("REDIS_AUTH"), w.redisTLSAuth)
		}
	}
	// The image's trust store, where REDIS_TLS verifies Redis (Envoy
	// Gateway sets no REDIS_TLS_CACERT): Go reads it from SSL_CERT_FILE.
	w.caBundled = filepath.Join(t.TempDir(), "ca-certificates.crt")
	testcert.WriteFile(t, w.caBundled, w.redisCA.PEM)
	return w
}

// xdsTLS is the TLS of Envoy Gateway's xDS server for the rate-limit
// service: its certificate, and the client certificate its certgen
// issued required.
func (w *egWorld) xdsTLS(t *testing.T) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{w.xdsPair.TLS(t)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: w.ca.Pool(), MinVersion: tls.VersionTLS12}
}

// envoyGatewayRules is a RateLimitConfig in the shape Envoy Gateway's
// translator pushes (its testdata/out/ratelimit-config/distinct-match.yaml):
// named and with the domain of the listener, the route's descriptor, and
// below it one limit per value of a request header. The limit is of a
// day, so that the test never sees its window end. It goes as the
// RateLimitConfig proto xDS carries, whose name is a field floodgate
// reads today; loading the translator's output as rule files (YAML with
// a top-level name:) is the same issue's point 3 (#44), worked on apart.
func envoyGatewayRules() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "first-listener", Domain: "first-listener", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "first-route", Value: "first-route",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "rule-0-match-0",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: egLimit},
		}},
	}}}
}

// egLimit is the requests a day the pushed rules allow.
const egLimit = 3

// dashboardRules are the rules of the example its dashboard
// (global-ratelimit.json) queries: the domain of its DefaultDomain
// variable, a route's descriptor and a rule's, each with a value, as
// Envoy Gateway's translator writes a limit shared by every client of a
// route.
func dashboardRules() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: dashboardRoute, Value: dashboardRoute,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "rule-0-match-0", Value: "rule-0-match-0",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: egLimit},
		}},
	}}}
}

// dashboardRoute is the route of the dashboard's example.
const dashboardRoute = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example"

// egRequest is what Envoy asks for a request of user on that route.
func egRequest(user string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "first-listener", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "first-route", Value: "first-route"}, {Key: "rule-0-match-0", Value: user}}}}}
}

// egRun is a floodgate running one container's environment.
type egRun struct {
	*egContainer
	f       *harness.Floodgate
	pod     string // the pod's name, as the downward API gives it
	environ []string
	promURL string             // the moved PROMETHEUS_ADDR and the scrape path, when on
	traces  *otlptest.Receiver // when tracing is on
	statsd  *tcpLines          // when USE_STATSD=true
	calls   int                // ShouldRateLimit calls made, each one hit
	over    int                // of those, over the limit
}

// start runs floodgate with the container's environment, its files and
// ports moved to a temporary directory and free ports, nothing else
// changed, and waits until /healthcheck answers OK.
func (w *egWorld) start(t *testing.T, e *egContainer) (*egRun, error) {
	return w.run(t, e, harness.Options{Bin: harness.Binary(t)})
}

// run runs o.Bin as start does, o saying whether to wait. A port the
// environment moved (PROMETHEUS_ADDR) that another process takes before
// floodgate listens gets a new environment, up to three times.
func (w *egWorld) run(t *testing.T, e *egContainer, o harness.Options) (*egRun, error) {
	for attempt := 1; ; attempt++ {
		r, err := w.runOnce(t, e, o)
		if err == nil || attempt == harness.PortAttempts || !harness.PortTaken(err.Error()) {
			return r, err
		}
	}
}

// runOnce is one attempt of run.
func (w *egWorld) runOnce(t *testing.T, e *egContainer, o harness.Options) (*egRun, error) {
	dir, err := os.MkdirTemp(tempRoot, "eg-")
	if err != nil {
		return nil, err
	}
	r := &egRun{egContainer: e, pod: e.dep.Name + "-7d9c5b6f4-x2k8p"}
	if r.environ, err = w.environment(t, r, dir); err != nil {
		return nil, err
	}
	o.Env, o.EnvAddrs, o.Dir = r.environ, true, dir
	r.f, err = harness.StartFloodgate(context.Background(), o)
	return r, err
}

// environment is the container's environment for a run in dir: each path
// below a volume's mount moved below dir (where fill writes the volume's
// files), each other absolute path below dir, each address to what the
// test runs, each value from elsewhere (a Secret, the downward API)
// resolved; it fails on an address it does not know. The process gets
// nothing else but SSL_CERT_FILE, the image's trust store, with REDIS_TLS.
func (w *egWorld) environment(t *testing.T, r *egRun, dir string) ([]string, error) {
	mounts := map[string]string{}
	for _, m := range r.c.VolumeMounts {
		mounts[m.MountPath] = filepath.Join(dir, m.Name)
		if err := w.fill(t, m.Name, mounts[m.MountPath]); err != nil {
			return nil, err
		}
	}
	var env []string
	for _, v := range r.c.Env {
		value, err := w.resolve(r, v)
		if err != nil {
			return nil, err
		}
		if value, err = w.move(t, r, v.Name, value, dir, mounts); err != nil {
			return nil, err
		}
		env = append(env, v.Name+"="+value)
	}
	if r.env("REDIS_TLS") == "true" {
		env = append(env, "SSL_CERT_FILE="+w.caBundled)
	}
	if r.env("USE_STATSD") == "true" {
		// Its statsd server, localhost:8125 by default, moved.
		r.statsd = listenTCPLines(t)
		env = append(env, "STATSD_PORT="+r.statsd.port())
	}
	return env, nil
}

// resolve is a variable's value, from a Secret or the downward API when
// it comes from there.
func (w *egWorld) resolve(r *egRun, v corev1.EnvVar) (string, error) {
	switch from := v.ValueFrom; {
	case from == nil:
		return v.Value, nil
	case from.SecretKeyRef != nil && v.Name == "REDIS_URL":
		return "redis.redis.svc:6379", nil // the Secret's address, moved like the others
	case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.name":
		return r.pod, nil
	}
	return "", fmt.Errorf("%s: %s comes from %v, which the test does not resolve", r.name(), v.Name, v.ValueFrom)
}

// move moves a value the test cannot leave as it is: a path, an address.
func (w *egWorld) move(t *testing.T, r *egRun, name, value, dir string, mounts map[string]string) (string, error) {
	switch name {
	case "CONFIG_GRPC_XDS_SERVER_URL":
		return w.xds.Addr, nil
	case "REDIS_URL":
		return w.redisURL(r)
	case "PROMETHEUS_ADDR":
		port := strconv.Itoa(harness.FreePort(t))
		r.promURL = "http://127.0.0.1:" + port + r.dep.Spec.Template.Annotations["prometheus.io/path"]
		host, _, err := net.SplitHostPort(value)
		return net.JoinHostPort(host, port), err
	case "OTEL_EXPORTER_OTLP_ENDPOINT":
		r.traces = otlptest.Start(t)
		return r.traces.HTTPEndpoint(), nil
	}
	if strings.HasPrefix(value, "/") {
		for mount, to := range mounts {
			if rest, ok := strings.CutPrefix(value, mount); ok && (rest == "" || rest[0] == '/') {
				return to + rest, nil
			}
		}
		return filepath.Join(dir, value), nil
	}
	if strings.Contains(value, ".svc") || strings.Contains(value, "envoy-gateway:") {
		return "", fmt.Errorf("%s: %s=%s is an address the test does not move", r.name(), name, value)
	}
	return value, nil
}

// redisURL is the Redis a run's REDIS_* variables ask for, in the form
// they ask it: over TLS with a password, through a Sentinel, or plain.
func (w *egWorld) redisURL(r *egRun) (string, error) {
	switch {
	case strings.EqualFold(r.env("REDIS_TYPE"), "sentinel"):
		return redistest.SentinelMasterName + "," + w.sentinel.Sentinels[0].Addr, nil
	case r.env("REDIS_TLS") == "true":
		return w.redisTLS.TLSAddr, nil
	case r.env("REDIS_AUTH") != "":
		return "", fmt.Errorf("%s: REDIS_AUTH without REDIS_TLS, which the test's plain Redis does not ask", r.name())
	}
	return w.redis.Addr, nil
}

// fill writes into dir the files of the volume Envoy Gateway mounts under
// name: its envoy-rate-limit Secret (certs), the Redis client certificate
// Secret (redis-certs), its statsd-exporter-config ConfigMap.
func (w *egWorld) fill(t *testing.T, name, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	switch name {
	case "certs":
		w.rateLimit.Write(t, dir, "tls")
		w.ca.WriteCA(t, dir, "ca")
	case "redis-certs":
		w.redisClient.Write(t, dir, "tls")
	case "statsd-exporter-config":
		data, err := os.ReadFile(filepath.Join(envoyGatewayDir, "statsd_conf.yaml"))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "conf.yaml"), data, 0o644)
	default:
		return fmt.Errorf("a volume %q the test does not know the content of", name)
	}
	return nil
}
