# Developer entry points. Every target works on a fresh clone with only Go
# installed; tools are fetched by exact version through `go run`.

GO               ?= go
STATICCHECK      ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT        ?= golang.org/x/perf/cmd/benchstat@latest
FUZZTIME         ?= 10s
BENCHCOUNT       ?= 6
STRESS_TIMEOUT   ?= 60m

# Nested modules (each has its own go.mod) are tested like the root module;
# one with a Makefile of its own is tested by its `test` target.
NESTED_MODULES := $(patsubst %/go.mod,%,$(wildcard */go.mod))
NESTED_MAKE    := $(patsubst %/Makefile,%,$(wildcard $(NESTED_MODULES:=/Makefile)))
NESTED_PLAIN   := $(filter-out $(NESTED_MAKE),$(NESTED_MODULES))

# The recipe lines of a nested module's tests. make runs a line that calls
# a sub-make even under `make -n`, so that the sub-make can print its
# commands (the `+` before the sub-makes' line says so); the go commands
# are therefore kept off that line.
define test-plain-module
	@echo "== module $(1)"
	cd $(1) && $(GO) vet ./... && $(GO) test -race -shuffle=on -timeout 10m ./...

endef
define test-make-module
	@echo "== module $(1)"
	$(MAKE) -C $(1) test GO=$(GO)

endef

.PHONY: all test browser stress bench microbench fuzz lint example example-remote

all: lint test

## test: go vet, then the race-enabled, shuffled test suite of every module
## (a nested module with a Makefile runs its own `test` target: bench/ adds
## its -quick run of every workload on every implementation). The debug
## page's browser test needs Chromium: `make browser` installs it first when
## it is missing, and PROCSCHED_BROWSER makes the test fail rather than skip
## if the browser cannot run.
test:
	@command -v chromium >/dev/null 2>&1 || $(MAKE) browser
	$(GO) vet ./...
	PROCSCHED_BROWSER="$$(command -v chromium)" $(GO) test -race -shuffle=on -timeout 10m ./...
	$(foreach m,$(NESTED_PLAIN),$(call test-plain-module,$(m)))
	+$(foreach m,$(NESTED_MAKE),$(call test-make-module,$(m)))

## browser: headless Chromium for the debug page's browser test
## (schedhttp/), installed from Debian's packages when it is not on PATH.
## Installing needs root (CI runs as root); otherwise it says what to do.
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "make browser: chromium is not on PATH, and installing it needs root;" >&2; \
		echo "  run 'sudo make browser' or 'sudo apt-get install chromium'." >&2; \
		exit 1; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "make browser: chromium is not on PATH and there is no apt-get to install it;" >&2; \
		echo "  install Chromium with the system's package manager." >&2; \
		exit 1; \
	else \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium && \
		command -v chromium; \
	fi

## stress: the long soak and stress runs (build tag "stress" scales them up),
## in the root module and in every nested module that has stress tests.
stress:
	$(GO) test -race -shuffle=on -tags stress -timeout $(STRESS_TIMEOUT) ./...
	@set -e; for m in $(NESTED_MODULES); do \
		if grep -rqsl --include='*_test.go' '^//go:build stress' $$m; then \
			echo "== module $$m"; \
			(cd $$m && $(GO) test -race -shuffle=on -tags stress -timeout $(STRESS_TIMEOUT) ./...); \
		fi; \
	done

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

## fuzz: every fuzz target of every module for FUZZTIME each.
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

## example-remote: two nodes exchanging messages over an embedded NATS
## server (remote/ is its own module, so `go run` runs from there).
example-remote:
	cd remote && $(GO) run ./examples/twonode
