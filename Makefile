GO ?= go
# Each fuzz target runs this long in `make test`; longer runs: make fuzz FUZZTIME=5m.
FUZZTIME ?= 3s

.PHONY: test unit fuzz build lint run

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

build:
	$(GO) build -o bin/floodgate ./cmd/server

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

run:
	$(GO) run ./cmd/server
