// Package examples holds no code: the directory holds the deployment
// examples (Envoy, Kubernetes, Helm, Istio, Prometheus, Grafana) and the
// tests that check them, the Dockerfile, docker-compose.yml and the
// README's commands against the real server. It is a Go module of its own,
// so that the tools the tests check the files with never reach the
// server's go.mod; `go test ./...` here runs them (make test does). The
// tests are in package examples_test:
//
//   - envoy_test.go has the real Envoy validate every Envoy configuration
//     the repository ships (and refuse a broken copy of each), and
//     envoy_examples_test.go runs the examples in front of floodgate: the
//     descriptors each route sends, the headers and bodies clients get, TCP
//     connections limited per address.
//   - istio_test.go builds the Istio gateway's Envoy configuration with the
//     EnvoyFilters' patches, for envoy_test.go, and checks the manifests'
//     names, ports and labels.
//   - readme_test.go runs the README's commands, those of the demo through
//     the real Envoy running examples/envoy*.yaml, and grpcurl's as
//     written, with go tool running this module's grpcurl.
//   - floodgate_test.go builds the binary as the Dockerfile does and runs it.
//   - Docker, Compose, Kubernetes and Helm cannot run here, so their files
//     are read by the tools' own Go code and checked against each other and
//     against the binary: docker_test.go parses the Dockerfile with
//     BuildKit, docker_context_test.go matches .dockerignore with
//     moby/patternmatcher;
//     compose_test.go loads docker-compose.yml with compose-go;
//     kubernetes_test.go decodes each manifest strictly into its
//     k8s.io/api type and matches selectors with apimachinery (helpers in
//     kubernetes_manifests_test.go);
//     helm_test.go renders and lints examples/helm/floodgate with Helm's
//     own code and compares it with examples/kubernetes. Each also shows
//     that the tool refuses broken copies of the files.
//   - grafana_test.go parses every query of examples/grafana/floodgate.json
//     with Prometheus's PromQL parser and checks each metric it names
//     against a scrape of the running binary.
//   - docs_test.go checks the docs' rule examples, links, and that every
//     test docs/reliability.md cites exists.
//
// The directory livepage holds the live page's test in headless Chromium.
package examples
