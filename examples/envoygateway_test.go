package examples_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	egvalidation "github.com/envoyproxy/gateway/api/v1alpha1/validation"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// envoyGatewayDir holds Envoy Gateway's own files, unchanged, at the
// commit its README names.
var envoyGatewayDir = filepath.Join(repoRoot, "testdata", "envoy-gateway")

// rateLimitServiceName is the name of Envoy Gateway's rate-limit Service,
// which its Envoy dials and the rate-limit certificate is issued for.
const rateLimitServiceName = "envoy-ratelimit.envoy-gateway-system.svc.cluster.local"

// egContainer is the rate-limit container of Envoy Gateway's rendered
// Deployments, one per distinct container: several Deployments differ only
// in what the process never sees (labels, tolerations, the image's name,
// resources), and stand together.
type egContainer struct {
	files []string // the Deployments' files it stands for
	dep   *appsv1.Deployment
	c     corev1.Container
}

func (e *egContainer) name() string { return strings.Join(e.files, "+") }

// env returns the value the container's environment gives name ("" when
// it gives none, or gives it from elsewhere).
func (e *egContainer) env(name string) string {
	for _, v := range e.c.Env {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}

// envoyGatewayContainers decodes every Deployment of Envoy Gateway's test
// data with the Kubernetes API types, as the API server would, and
// returns their rate-limit containers, one per distinct container.
func envoyGatewayContainers(t *testing.T) []*egContainer {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(envoyGatewayDir, "deployments", "*.yaml"))
	if err != nil || len(files) < 19 {
		t.Fatalf("Envoy Gateway's Deployments: %d files, %v; want its 19 (testdata/envoy-gateway/README.md)", len(files), err)
	}
	byKey := map[string]*egContainer{}
	var out []*egContainer
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(file, data)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %v (%d objects)", file, err, len(objs))
		}
		dep, ok := objs[0].obj.(*appsv1.Deployment)
		if !ok {
			t.Fatalf("%s: a %s, want a Deployment", file, objs[0].kind)
		}
		c := rateLimitContainer(t, file, dep)
		key := processKey(t, dep, c)
		if e := byKey[key]; e != nil {
			e.files = append(e.files, strings.TrimSuffix(filepath.Base(file), ".yaml"))
			continue
		}
		e := &egContainer{files: []string{strings.TrimSuffix(filepath.Base(file), ".yaml")}, dep: dep, c: c}
		byKey[key] = e
		out = append(out, e)
	}
	return out
}

// rateLimitContainer is the Deployment's container that runs
// /bin/ratelimit, the command floodgate's image provides.
func rateLimitContainer(t *testing.T, file string, dep *appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range dep.Spec.Template.Spec.Containers {
		if slices.Equal(c.Command, []string{"/bin/ratelimit"}) {
			if len(c.Args) > 0 {
				t.Fatalf("%s: %s has arguments %q, which the test does not pass", file, c.Name, c.Args)
			}
			return c
		}
	}
	t.Fatalf("%s: no container runs /bin/ratelimit", file)
	return corev1.Container{}
}

// processKey is what of a Deployment the rate-limit process sees or is
// probed and scraped by: its container without the image, resources and
// security context, its volumes, and its pod's Prometheus annotations.
func processKey(t *testing.T, dep *appsv1.Deployment, c corev1.Container) string {
	t.Helper()
	c.Image, c.ImagePullPolicy, c.Resources, c.SecurityContext = "", "", corev1.ResourceRequirements{}, nil
	var volumes []string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		volumes = append(volumes, v.Name) // a volume's content comes from its name: see egWorld.fill
	}
	var scrape []string
	for k, v := range dep.Spec.Template.Annotations {
		if strings.HasPrefix(k, "prometheus.io/") {
			scrape = append(scrape, k+"="+v)
		}
	}
	slices.Sort(scrape)
	b, err := json.Marshal([]any{c, volumes, scrape})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

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

// egStat is the reference's statsd name of the pushed rule.
const egStat = "ratelimit.service.rate_limit.first-listener.first-route_first-route.rule-0-match-0"

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
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
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

// TestEnvoyGatewayDeployments runs floodgate as each Deployment Envoy
// Gateway renders for its rate-limit service runs the reference server:
// the container's command and environment, with its files (the
// envoy-rate-limit Secret, the statsd_exporter mapping, Redis's client
// certificate) and its ports moved to a temporary directory and free
// ports, against a real Redis (over TLS with a password, or through a
// Sentinel, where the Deployment asks) and a real xDS server over mutual
// TLS, pushing rules in the shape Envoy Gateway's translator writes. Each
// must be ready on the probes' /healthcheck; serve gRPC over TLS only,
// asking no client certificate, as the reference with
// GRPC_SERVER_TLS_CA_CERT (which it does not read), and say so at start;
// answer by the pushed rules; and, as its environment asks, serve the
// reference's stats through Envoy Gateway's mapping on the metrics port
// its pod annotations scrape, send statsd, export traces.
func TestEnvoyGatewayDeployments(t *testing.T) {
	t.Parallel() // beside TestEnvoyGatewayStartOrder: both wait on timers
	cs := envoyGatewayContainers(t)
	harness.Binary(t)
	w := newEGWorld(t, cs)
	// Started together, so that the checks that wait for a statsd flush
	// (every 10 s, Envoy Gateway sets no STATS_FLUSH_INTERVAL) or a batch
	// of spans wait for them once.
	runs := make([]*egRun, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { runs[i], errs[i] = w.start(t, c) })
	}
	wg.Wait()
	for i, r := range runs {
		if r != nil && r.f != nil {
			t.Cleanup(func() { r.f.Stop(0) })
		}
		if errs[i] != nil {
			t.Fatalf("%s: %v", cs[i].name(), errs[i])
		}
	}
	for _, r := range runs {
		t.Run(r.name(), func(t *testing.T) {
			r.checkProbes(t)
			r.checkGRPC(t, w)
			r.checkStartNotes(t)
		})
	}
	for _, r := range runs {
		t.Run(r.name()+"/stats", func(t *testing.T) {
			r.checkPrometheus(t)
			r.checkDashboard(t)
			r.checkStatsd(t)
			r.checkTraces(t)
		})
	}
}

// checkProbes asks each probe of the Deployment, on the HTTP port (8080,
// PORT's default, moved), for /healthcheck's OK.
func (r *egRun) checkProbes(t *testing.T) {
	t.Helper()
	for what, p := range map[string]*corev1.Probe{"startup": r.c.StartupProbe, "readiness": r.c.ReadinessProbe, "liveness": r.c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 8080 {
			t.Errorf("%s probe %+v: want an HTTP GET on 8080, the reference's HTTP port", what, p)
			continue
		}
		code, body := httpGet(t, "http://"+r.f.HTTPAddr+p.HTTPGet.Path)
		if code != http.StatusOK || body != "OK" {
			t.Errorf("%s probe GET %s: %d %q, want 200 OK", what, p.HTTPGet.Path, code, body)
		}
	}
}

// checkGRPC calls as Envoy Gateway's Envoy does: over TLS, trusting the
// CA of /certs/ca.crt, with its client certificate at hand. The server
// must not ask for it (the reference does not read
// GRPC_SERVER_TLS_CA_CERT), must refuse plaintext, and must answer by the
// pushed rules: the limit's requests pass, the next is over.
func (r *egRun) checkGRPC(t *testing.T, w *egWorld) {
	t.Helper()
	var wasAsked atomic.Bool
	rls := w.dial(t, r.f.GRPCAddr, &wasAsked)
	user := strings.Join(r.files, "+")
	for i := range egLimit + 1 {
		resp := r.call(t, rls, user)
		want := pb.RateLimitResponse_OK
		if i == egLimit {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != egLimit {
			t.Fatalf("call %d: %v, want %v by the pushed limit of %d a day", i+1, resp, want, egLimit)
		}
	}
	if wasAsked.Load() {
		t.Error("the gRPC port asked for a client certificate; the reference, with GRPC_SERVER_TLS_CA_CERT and no GRPC_CLIENT_TLS_CACERT, asks for none")
	}
	plain, err := grpc.NewClient(r.f.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewRateLimitServiceClient(plain).ShouldRateLimit(ctx, egRequest(user)); err == nil {
		t.Error("a plaintext call was answered; the gRPC port must speak TLS only")
	}
	if r.dashboard() {
		for range egLimit + 1 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := rls.ShouldRateLimit(ctx, dashboardRequest())
			cancel()
			if err != nil {
				t.Fatalf("ShouldRateLimit of the dashboard's rule: %v", err)
			}
		}
	}
	if r.traces != nil {
		// Sampled at TRACING_SAMPLING_RATE, down to 0.6: thirty more
		// calls leave no chance of none.
		for range 30 {
			r.call(t, rls, user+"/traced")
		}
	}
}

// dashboard reports whether the run stands for Envoy Gateway's default
// Deployment, whose metrics its dashboard is checked against: only it
// calls the dashboard's rule, whose one counter every run would share.
func (r *egRun) dashboard() bool { return slices.Contains(r.files, "default") }

// dashboardRequest is what Envoy asks for a request on the dashboard's
// route.
func dashboardRequest() *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: dashboardRoute, Value: dashboardRoute}, {Key: "rule-0-match-0", Value: "rule-0-match-0"}}}}}
}

// dial connects to addr as Envoy Gateway's Envoy does: over TLS,
// trusting the CA of /certs/ca.crt, with its client certificate at hand,
// and records in asked whether the server asked for it. The connection is
// closed when the test ends.
func (w *egWorld) dial(t *testing.T, addr string, asked *atomic.Bool) pb.RateLimitServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: w.ca.Pool(), ServerName: rateLimitServiceName, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			c := w.envoy.TLS(t)
			return &c, nil
		}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// call makes one ShouldRateLimit call of user and counts it.
func (r *egRun) call(t *testing.T, rls pb.RateLimitServiceClient, user string) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rls.ShouldRateLimit(ctx, egRequest(user))
	if err != nil {
		t.Fatalf("ShouldRateLimit over TLS: %v", err)
	}
	r.calls++
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		r.over++
	}
	return resp
}

// checkStartNotes: the log says that no client certificate is asked for,
// and that the Prometheus listener serves where it is on.
func (r *egRun) checkStartNotes(t *testing.T) {
	t.Helper()
	logs := r.f.Logs.String()
	if !strings.Contains(logs, "GRPC_SERVER_TLS_CA_CERT is not read") {
		t.Errorf("no note that GRPC_SERVER_TLS_CA_CERT is not read:\n%s", logs)
	}
	if on := strings.Contains(logs, "serving the reference's stats to Prometheus"); on != (r.promURL != "") {
		t.Errorf("Prometheus listener on: %v, want %v (PROMETHEUS_ADDR %q):\n%s", on, r.promURL != "", r.env("PROMETHEUS_ADDR"), logs)
	}
}

// checkPrometheus scrapes the metrics port where the pod's annotations
// say, as Envoy Gateway's Prometheus does, once the first statsd flush
// has fed it: the pushed rule's series are there, named by Envoy
// Gateway's mapping, and floodgate's own are not (they stay on the HTTP
// port). Without Prometheus there is no metrics port.
func (r *egRun) checkPrometheus(t *testing.T) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range r.c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if r.promURL == "" {
		if _, ok := ports["metrics"]; ok {
			t.Error("a metrics port without PROMETHEUS_ADDR")
		}
		return
	}
	_, addrPort, _ := net.SplitHostPort(r.env("PROMETHEUS_ADDR"))
	if a := r.dep.Spec.Template.Annotations["prometheus.io/port"]; a != addrPort || strconv.Itoa(int(ports["metrics"])) != a {
		t.Errorf("scraped on %s, the metrics port is %d, PROMETHEUS_ADDR's %s: want one port", a, ports["metrics"], addrPort)
	}
	series := `ratelimit_service_rate_limit_total_hits{domain="first-listener",key1="first-route_first-route",key2="rule-0-match-0"}`
	want := strconv.Itoa(r.calls)
	body := waitFor(t, r.promURL, series, want, 30*time.Second)
	over := `ratelimit_service_rate_limit_over_limit{domain="first-listener",key1="first-route_first-route",key2="rule-0-match-0"} ` + strconv.Itoa(r.over)
	if !strings.Contains(body, over+"\n") {
		t.Errorf("no %s in:\n%s", over, body)
	}
	if strings.Contains(body, "floodgate_") {
		t.Error("floodgate_* metrics on the Prometheus port; they belong on the HTTP port's /metrics")
	}
	if _, own := httpGet(t, "http://"+r.f.HTTPAddr+"/metrics"); !strings.Contains(own, "floodgate_hits_total") {
		t.Error("no floodgate_hits_total on the HTTP port's /metrics")
	}
}

// waitFor scrapes url until series has the value want, and returns the
// last scrape.
func waitFor(t *testing.T, url, series, want string, timeout time.Duration) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var code int
		if code, body = httpGet(t, url); code == http.StatusOK && strings.Contains(body, series+" "+want+"\n") {
			return body
		}
	}
	t.Fatalf("%s: no %s %s after %v:\n%s", url, series, want, timeout, body)
	return ""
}

// checkStatsd: with USE_STATSD=true too, the rule's counters reach the
// statsd server, beside Prometheus.
func (r *egRun) checkStatsd(t *testing.T) {
	t.Helper()
	if r.statsd == nil {
		return
	}
	if !r.statsd.wait(egStat+".total_hits:", 30*time.Second) {
		t.Errorf("no %s.total_hits on the statsd server; got %q", egStat, r.statsd.all())
	}
}

// checkTraces: with TRACING_ENABLED=true, spans reach the collector at
// OTEL_EXPORTER_OTLP_ENDPOINT, with the service's name, namespace and the
// pod's name as Envoy Gateway sets them.
func (r *egRun) checkTraces(t *testing.T) {
	t.Helper()
	if r.traces == nil {
		if r.env("TRACING_ENABLED") == "true" {
			t.Error("tracing on, but no collector endpoint moved")
		}
		return
	}
	spans := r.traces.Wait(t, "ShouldRateLimit Execution", 1, 30*time.Second)
	s, _ := otlptest.Find(spans, "ShouldRateLimit Execution")
	for k, want := range map[string]string{"service.name": r.env("TRACING_SERVICE_NAME"),
		"service.namespace": r.env("TRACING_SERVICE_NAMESPACE"), "service.instance.id": r.pod} {
		if s.Resource[k] != want {
			t.Errorf("span resource %s = %v, want %q", k, s.Resource[k], want)
		}
	}
}

// tcpLines is a statsd server over TCP, floodgate's protocol for plain
// statsd as the reference's: it keeps the lines it receives.
type tcpLines struct {
	l     net.Listener
	mu    sync.Mutex
	lines []string
}

func listenTCPLines(t *testing.T) *tcpLines {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpLines{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					s.mu.Lock()
					s.lines = append(s.lines, sc.Text())
					s.mu.Unlock()
				}
			}()
		}
	}()
	return s
}

func (s *tcpLines) port() string {
	_, port, _ := net.SplitHostPort(s.l.Addr().String())
	return port
}

func (s *tcpLines) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// wait reports whether a line starting with prefix arrives within timeout.
func (s *tcpLines) wait(prefix string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if slices.ContainsFunc(s.all(), func(l string) bool { return strings.HasPrefix(l, prefix) }) {
			return true
		}
	}
	return false
}

// httpGet returns the status and body of a GET of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// unservedPanels are the metrics Envoy Gateway's dashboard queries that
// neither floodgate nor the reference serves, with why: its panel stays
// empty either way.
var unservedPanels = map[string]string{
	"go_memstats_gc_cpu_fraction": "client_golang stopped exporting it in v1.12; the reference (v1.19.1) and floodgate (v1.25) serve go_* without it",
}

// checkDashboard checks the panels of Envoy Gateway's rate-limit
// dashboard against what its Prometheus scrapes from the default
// Deployment's metrics port, once the dashboard's rule has been called
// to its limit and past it: every selector, parsed with Prometheus's
// PromQL parser, selects a series, its DefaultDomain variable at its
// default, the labels Prometheus adds from the pod's labels
// (app_kubernetes_io_component) matched against the Deployment's pod
// labels.
func (r *egRun) checkDashboard(t *testing.T) {
	t.Helper()
	if !r.dashboard() {
		return
	}
	d := loadDashboard(t, filepath.Join(envoyGatewayDir, "global-ratelimit.json"))
	domain := d.variable(t, "DefaultDomain")
	served := scrapeSeries(t, r.promURL)
	podLabels := map[string]string{}
	for k, v := range r.dep.Spec.Template.Labels {
		podLabels[model.EscapeName(k, model.UnderscoreEscaping)] = v
	}
	checked := 0
	for _, q := range d.queries(t) {
		if !strings.HasPrefix(q.where, "panel") {
			continue // its variables list Envoy Gateway's controller, not this process
		}
		sels, err := promqlSelectors(strings.ReplaceAll(q.expr, "$DefaultDomain", domain))
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, sel := range sels {
			if why, ok := unservedPanels[sel.Name]; ok {
				if len(served[sel.Name]) > 0 {
					t.Errorf("%s: %s is served, which unservedPanels says is not (%s)", q.where, sel.Name, why)
				}
				continue
			}
			if !selects(sel, served[sel.Name], podLabels) {
				t.Errorf("%s: %s selects none of %d series %q serves", q.where, sel, len(served[sel.Name]), sel.Name)
			}
			checked++
		}
	}
	if checked < 5 {
		t.Errorf("%d of the dashboard's selectors checked, want its 5 panels' at least", checked)
	}
}

// selects reports whether one of series (each one's labels) matches every
// matcher of sel, a label the pod's labels give matched against those.
func selects(sel *parser.VectorSelector, series []map[string]string, podLabels map[string]string) bool {
	for _, labels := range series {
		all := true
		for _, m := range sel.LabelMatchers {
			v, fromPod := podLabels[m.Name]
			if !fromPod {
				v = labels[m.Name]
			}
			if m.Name != "__name__" && !m.Matches(v) {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// variable returns the current value of the dashboard's custom variable
// name.
func (d dashboard) variable(t *testing.T, name string) string {
	t.Helper()
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Name == name && v.Type == "custom" {
			return q
		}
	}
	t.Fatalf("the dashboard has no custom variable %s", name)
	return ""
}

// scrapeSeries returns the series a scrape of url serves, by metric
// name, as their labels; a histogram's also as name_bucket, _sum and
// _count, as Prometheus stores them.
func scrapeSeries(t *testing.T, url string) map[string][]map[string]string {
	t.Helper()
	out := map[string][]map[string]string{}
	for name, mf := range scrapeFamilies(t, url) {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{name}
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				names = append(names, name+"_bucket", name+"_sum", name+"_count")
			}
			for _, n := range names {
				out[n] = append(out[n], labels)
			}
		}
	}
	return out
}

// envoyGatewayConfigSection is the section of docs/deploying.md whose
// YAML block is the EnvoyGateway configuration that runs floodgate.
const envoyGatewayConfigSection = "Envoy Gateway"

// TestEnvoyGatewayConfig decodes docs/deploying.md's EnvoyGateway
// configuration strictly with Envoy Gateway's own API types, applies its
// defaults and its validation, as its config loader does, and checks that
// it runs floodgate's image; broken copies of it must fail.
func TestEnvoyGatewayConfig(t *testing.T) {
	var yamls []mdBlock
	for _, b := range readMarkdown(t, filepath.Join(repoRoot, "docs", "deploying.md")).blocks {
		if b.section == envoyGatewayConfigSection && b.lang == "yaml" {
			yamls = append(yamls, b)
		}
	}
	if len(yamls) != 1 {
		t.Fatalf("docs/deploying.md, section %q: %d YAML blocks, want the EnvoyGateway configuration", envoyGatewayConfigSection, len(yamls))
	}
	doc := yamls[0].body()
	eg, err := loadEnvoyGateway(doc)
	if err != nil {
		t.Fatalf("docs/deploying.md:%d: %v", yamls[0].line, err)
	}
	image := eg.Provider.Kubernetes.RateLimitDeployment.Container.Image
	if image == nil || !strings.HasSuffix(*image, "/floodgate:dev") {
		t.Errorf("rateLimitDeployment image %v, want floodgate:dev (docker build -t floodgate:dev .) in a registry", image)
	}
	for _, broken := range []struct{ from, to, want string }{
		{"rateLimitDeployment:", "rateLimitDeploymnt:", `unknown field "rateLimitDeploymnt"`},
		{"type: Redis", "type: Memcached", "unsupported ratelimit backend Memcached"},
		{"url: redis.redis-system.svc.cluster.local:6379", `url: ""`, "exactly one of ratelimit redis url or urlRef must be set"},
	} {
		if !strings.Contains(doc, broken.from) {
			t.Fatalf("the configuration has no %q to break", broken.from)
		}
		if _, err := loadEnvoyGateway(strings.Replace(doc, broken.from, broken.to, 1)); err == nil || !strings.Contains(err.Error(), broken.want) {
			t.Errorf("%q for %q: %v, want an error naming %q", broken.to, broken.from, err, broken.want)
		}
	}
}

// loadEnvoyGateway reads an EnvoyGateway configuration as Envoy Gateway's
// config loader does: strictly, then its defaults, then its validation.
func loadEnvoyGateway(doc string) (*egv1a1.EnvoyGateway, error) {
	eg := &egv1a1.EnvoyGateway{}
	if err := sigsyaml.UnmarshalStrict([]byte(doc), eg); err != nil {
		return nil, err
	}
	if eg.APIVersion != egv1a1.GroupVersion.String() || eg.Kind != egv1a1.KindEnvoyGateway {
		return nil, fmt.Errorf("apiVersion %q kind %q, want %s %s", eg.APIVersion, eg.Kind, egv1a1.GroupVersion, egv1a1.KindEnvoyGateway)
	}
	eg.SetEnvoyGatewayDefaults()
	if err := egvalidation.ValidateEnvoyGateway(eg); err != nil {
		return nil, err
	}
	if eg.Provider.Kubernetes == nil || eg.Provider.Kubernetes.RateLimitDeployment == nil {
		return nil, errors.New("no provider.kubernetes.rateLimitDeployment")
	}
	return eg, nil
}
