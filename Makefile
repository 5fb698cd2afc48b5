GO ?= go
# Each fuzz target runs this long in `make test`; longer runs: make fuzz FUZZTIME=5m.
FUZZTIME ?= 3s
# Length of `make soak`; `make test` runs a short version of the same test.
SOAK ?= 10m

.PHONY: test unit fuzz build lint run soak

# The whole suite, as CI runs it: lint, unit and end-to-end tests with the
# race detector, then a short run of every fuzz target.
test: lint unit fuzz

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Runs every Fuzz* target for FUZZTIME (go test -fuzz takes one target at a time).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# Steady load with rule changes every 2 s against a real floodgate and Redis
# for SOAK, checking that goroutines, open files, Redis connections and memory
# stay flat and that no error but the injected broken rule files occurs.
soak:
	$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./test/ -args -soak=$(SOAK)

build:
	$(GO) build -o bin/floodgate ./cmd/server

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

run:
	$(GO) run ./cmd/server
