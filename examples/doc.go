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
package examples
