package examples_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	egvalidation "github.com/envoyproxy/gateway/api/v1alpha1/validation"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/harness"
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
