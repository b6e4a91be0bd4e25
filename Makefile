# reclaimable: see README.md. Everything here needs only Go and make; the
# local control plane is built from the Go module proxy on first use.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := _output/bin/reclaimable
CLUSTER   ?= _output/cluster
E2E_FLAGS ?=
# The end-to-end tests (package ./e2e) carry the build tag e2e: they need
# root and start a control plane, so a plain `go test ./...` leaves them out.
E2E_TAGS  := -tags e2e

.PHONY: all build test unit fuzz e2e soak lint bench demo cluster-up cluster-down clean node-deps

all: build

## build: the reclaimable binary, static, as the container image builds it
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/reclaimable

## test: formatting and vet, unit tests (with the fuzzers' seed corpora), a short run of
## each fuzzer, then the end-to-end tests on a local control plane, short chaos soak included
test: lint unit fuzz e2e

unit:
	$(GO) test -race -count=1 ./...

## fuzz: each fuzz target for FUZZTIME (the parsers of user input: annotations, class parameters)
FUZZTIME ?= 15s
fuzz:
	$(GO) test ./podwatcher/ -run '^$$' -fuzz '^FuzzParseRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./provisioner/ -run '^$$' -fuzz '^FuzzParseParameters$$' -fuzztime $(FUZZTIME)

e2e: node-deps
	$(GO) test $(E2E_TAGS) -count=1 -timeout 45m $(E2E_FLAGS) ./e2e/

## soak: the chaos soak alone, long (SOAK_DURATION, SOAK_WORKERS)
SOAK_DURATION ?= 5m
SOAK_WORKERS  ?= 10
soak:
	$(GO) test $(E2E_TAGS) -count=1 -timeout 60m -run '^TestSoakChaos$$' -v ./e2e/ -args -soak.duration=$(SOAK_DURATION) -soak.workers=$(SOAK_WORKERS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet $(E2E_TAGS) ./...
	cd e2e/tools && $(GO) vet ./etcd

## node-deps: the one system package the real node needs to build (runc's
## seccomp support), installed when missing and when run as root; without
## root the node's tests say why they cannot run
node-deps:
	@if [ ! -e /usr/include/seccomp.h ] && [ "$$(id -u)" = 0 ]; then \
		echo "Installing libseccomp-dev (runc's seccomp support, for the real node)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null; \
	fi

## bench: latency, throughput, API cost and memory of the full cycle on a local control plane (BENCH_FLAGS=...)
bench: node-deps
	$(GO) run ./e2e/cmd/bench $(BENCH_FLAGS)

## demo: the volume cycle on a local control plane (KEEP=1 leaves it running)
demo: node-deps
	$(GO) run ./e2e/cmd/demo $(if $(KEEP),--keep)

## cluster-up / cluster-down: a local control plane to explore with kubectl
cluster-up: node-deps
	@$(GO) run ./e2e/cmd/localcluster up --dir $(CLUSTER)

cluster-down:
	@$(GO) run ./e2e/cmd/localcluster down --dir $(CLUSTER)

clean:
	rm -rf _output
