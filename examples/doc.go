// Package examples holds no code: the directory holds the deployment
// examples (Envoy, Kubernetes, Istio, Prometheus) and the tests that check
// them, the Dockerfile, docker-compose.yml and the README's commands
// against the real server, since none of them can be run here with Envoy or
// Docker. The tests are in package examples_test:
//
//   - envoyconf_test.go loads an Envoy config into go-control-plane's
//     Bootstrap and validates every typed_config inside it.
//   - envoymodel_test.go models what Envoy does with a request that floodgate
//     depends on (route choice, rate_limits actions, client address, the
//     answer) and serves it as a stand-in for Envoy.
//   - floodgate_test.go builds the binary as the Dockerfile does and runs it.
//   - the other files check one example each, readme_test.go runs the
//     README's commands, and docs_test.go checks the docs' rule examples,
//     links, and that every test docs/reliability.md cites exists.
package examples
