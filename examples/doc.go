// Package examples holds no code: the directory holds the deployment
// examples (Envoy, Kubernetes, Istio, Prometheus) and the tests that check
// them, the Dockerfile, docker-compose.yml and the README's commands
// against the real server. The tests are in package examples_test:
//
//   - envoy_test.go has the real Envoy validate every Envoy configuration
//     the repository ships (and refuse a broken copy of each), and runs the
//     examples in front of floodgate: the descriptors each route sends, the
//     headers and bodies clients get, TCP connections limited per address.
//   - istio_test.go builds the Istio gateway's Envoy configuration with the
//     EnvoyFilters' patches, for envoy_test.go, and checks the manifests'
//     names, ports and labels.
//   - readme_test.go runs the README's commands, those of the demo through
//     the real Envoy running examples/envoy*.yaml.
//   - floodgate_test.go builds the binary as the Dockerfile does and runs it.
//   - Docker, Compose and Kubernetes cannot run here: docker_test.go,
//     compose_test.go and kubernetes_test.go check those files against each
//     other and against the binary. docs_test.go checks the docs' rule
//     examples, links, and that every test docs/reliability.md cites exists.
//   - grafana_test.go checks every query of examples/grafana/floodgate.json
//     against a scrape of the running binary; helm_test.go renders
//     examples/helm/floodgate with a subset of Helm's functions and compares
//     it with examples/kubernetes; grpcurl_test.go makes the README's
//     grpcurl calls through the server's reflection.
package examples
