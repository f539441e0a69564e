# Developer entry points. Every target works on a fresh clone with only Go
# installed; tools are fetched by exact version through `go run`.

GO               ?= go
STATICCHECK      ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT        ?= golang.org/x/perf/cmd/benchstat@latest
FUZZTIME         ?= 10s
BENCHCOUNT       ?= 6
STRESS_TIMEOUT   ?= 60m

# Nested modules (each has its own go.mod) are tested like the root module.
NESTED_MODULES := $(patsubst %/go.mod,%,$(wildcard */go.mod))

.PHONY: all test stress bench microbench fuzz lint example

all: lint test

## test: go vet, then the race-enabled, shuffled test suite of every module
## (a nested module with a Makefile runs its own `test` target: bench/ adds
## its -quick run of every workload on every implementation).
test:
	$(GO) vet ./...
	$(GO) test -race -shuffle=on -timeout 10m ./...
	@set -e; for m in $(NESTED_MODULES); do \
		echo "== module $$m"; \
		if [ -f $$m/Makefile ]; then $(MAKE) -C $$m test GO=$(GO); \
		else (cd $$m && $(GO) vet ./... && $(GO) test -race -shuffle=on -timeout 10m ./...); fi; \
	done

## stress: the long soak and stress runs (build tag "stress" scales them up).
stress:
	$(GO) test -race -shuffle=on -tags stress -timeout $(STRESS_TIMEOUT) ./...

## bench: the comparison against goroutines and peer libraries (bench/):
## every implementation interleaved over several rounds; writes
## bench/results/latest.{md,svg,json}. ROUNDS, SIZE and BENCHFLAGS pass through.
bench:
	$(MAKE) -C bench bench GO=$(GO)

## microbench: the Go benchmarks of every package, BENCHCOUNT runs each,
## summarised by benchstat.
microbench:
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./... | tee bench/results/micro.txt
	$(GO) run $(BENCHSTAT) bench/results/micro.txt

## fuzz: every fuzz target of the root module for FUZZTIME each.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

## lint: formatting, vet, staticcheck, and go.mod tidiness of every module.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@set -e; for m in $(NESTED_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...); done
	./scripts/check-tidy.sh . $(NESTED_MODULES)

## example: the example run from the README.
example:
	$(GO) run ./examples/skynet
