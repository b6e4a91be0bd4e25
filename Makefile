# reclaimable: see README.md. Everything here needs only Go and make; the
# local control plane is built from the Go module proxy on first use.

GO        ?= go
# The version: VERSION's, the one place the manifests, the chart and the image
# take it from (make release VERSION=vX.Y.Z writes it into all of them).
VERSION   ?= $(shell cat VERSION)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := _output/bin/reclaimable
CLUSTER   ?= _output/cluster
E2E_FLAGS ?=
# The end-to-end tests (package ./e2e) carry the build tag e2e: they need
# root and start a control plane, so a plain `go test ./...` leaves them out.
E2E_TAGS  := -tags e2e

IMAGE_ARCHIVE ?= _output/image/reclaimable.tar

.PHONY: all build image test unit fuzz e2e peer soak lint generate chart-crd verify-generate release bench demo cluster-up cluster-down clean node-deps

all: build

## build: the reclaimable binary, static, as the container image builds it
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/reclaimable

## image: the image of VERSION (ghcr.io/reclaimable/reclaimable:VERSION) for this
## machine's platform, without a container engine, as one archive in
## IMAGE_ARCHIVE that docker load, kind load image-archive, k3s ctr images
## import, minikube image load and ctr images import take
image:
	$(GO) run ./hack/release --version $(VERSION) --archive $(IMAGE_ARCHIVE)

## test: formatting and vet, unit tests (with the fuzzers' seed corpora), a short run of
## each fuzzer, the end-to-end tests on a local control plane, short chaos soak included,
## then Kubernetes' own storage tests against each backend (peer)
test: lint unit fuzz e2e peer

unit:
	$(GO) test -race -count=1 ./...
	cd e2e/chart && $(GO) test -count=1 ./...

## fuzz: each fuzz target for FUZZTIME (the parsers of user input: annotations, class parameters)
FUZZTIME ?= 15s
fuzz:
	$(GO) test ./podwatcher/ -run '^$$' -fuzz '^FuzzParseRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./provisioner/backend/ -run '^$$' -fuzz '^FuzzParseParameters$$' -fuzztime $(FUZZTIME)
	$(GO) test ./provisioner/backend/ -run '^$$' -fuzz '^FuzzForClass$$' -fuzztime $(FUZZTIME)

e2e: node-deps
	$(GO) test $(E2E_TAGS) -count=1 -timeout 45m $(E2E_FLAGS) ./e2e/

## peer: Kubernetes' own storage tests (test/e2e/storage/external of the test bed's Kubernetes,
## module e2e/peer) against each backend behind a Delete class, on a control plane of their own,
## started without the project's CRDs as a new cluster, after the chart's first install and README.md's
## kind path, run as written on the real node;
## the log and the JUnit report in _output/peer (PEER_FOCUS=regexp runs only the tests it matches)
PEER_FOCUS ?=
peer: node-deps
	$(GO) test $(E2E_TAGS),peer -count=1 -timeout 90m -run '^(TestHelmFirstInstall|TestReadme|TestPeer)' -v ./e2e/ $(if $(PEER_FOCUS),-args -peer.focus='$(PEER_FOCUS)')

## soak: the chaos soak alone, long (SOAK_DURATION, SOAK_WORKERS)
SOAK_DURATION ?= 5m
SOAK_WORKERS  ?= 10
soak:
	$(GO) test $(E2E_TAGS) -count=1 -timeout 60m -run '^TestSoakChaos$$' -v ./e2e/ -args -soak.duration=$(SOAK_DURATION) -soak.workers=$(SOAK_WORKERS)

lint: verify-generate
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./hack/funclen
	$(GO) vet $(E2E_TAGS) ./...
	$(GO) vet $(E2E_TAGS),peer ./e2e/
	cd e2e/peer && $(GO) vet ./...
	cd e2e/tools && $(GO) vet ./etcd
	cd e2e/csidriver && $(GO) vet ./...
	cd e2e/chart && $(GO) vet ./...
	cd hack/actionlint && $(GO) run github.com/rhysd/actionlint/cmd/actionlint $(CURDIR)/.github/workflows/*.yaml

## release: VERSION=vX.Y.Z: writes the version into VERSION, the manifests and
## the chart, then builds the image for linux/amd64 and linux/arm64 as an OCI
## image layout, without a container engine, and the chart of that version
## installing that image tag, in _output/release/VERSION (.github/workflows/
## release.yaml publishes both on a tag)
RELEASE_DIR = $(CURDIR)/_output/release/$(VERSION)
release:
	$(GO) run ./hack/release --stamp --version $(VERSION) --out $(RELEASE_DIR)
	cd e2e/chart && $(GO) run ./cmd/chart package --chart $(CURDIR)/charts/reclaimable \
		--version $(patsubst v%,%,$(VERSION)) --app-version $(VERSION) --out $(RELEASE_DIR)

## generate: from the API types in apis/, their deep copies, the typed client
## (clientset, listers, informers in client/) and the CRD (manifests/base/crd/),
## with the generators pinned in hack/tools
MODULE    := github.com/reclaimable/reclaimable
TOOLS     := $(CURDIR)/_output/tools
API_PKGS  := $(MODULE)/apis/reclaimable/v1alpha1
HEADER    := hack/boilerplate.go.txt
generate:
	cd hack/tools && GOBIN=$(TOOLS) $(GO) install k8s.io/code-generator/cmd/deepcopy-gen k8s.io/code-generator/cmd/client-gen \
		k8s.io/code-generator/cmd/lister-gen k8s.io/code-generator/cmd/informer-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	$(TOOLS)/deepcopy-gen --go-header-file $(HEADER) --output-file zz_generated.deepcopy.go $(API_PKGS)
	rm -rf client manifests/base/crd
	$(TOOLS)/client-gen --go-header-file $(HEADER) --clientset-name versioned --input-base $(CURDIR)/apis --input reclaimable/v1alpha1 \
		--output-dir client/clientset --output-pkg $(MODULE)/client/clientset
	$(TOOLS)/lister-gen --go-header-file $(HEADER) --output-dir client/listers --output-pkg $(MODULE)/client/listers $(API_PKGS)
	$(TOOLS)/informer-gen --go-header-file $(HEADER) --output-dir client/informers --output-pkg $(MODULE)/client/informers \
		--versioned-clientset-package $(MODULE)/client/clientset/versioned --listers-package $(MODULE)/client/listers $(API_PKGS)
	$(TOOLS)/controller-gen crd paths=./apis/... output:crd:dir=manifests/base/crd
	$(MAKE) -s chart-crd

## chart-crd: the chart's CRD, from the CRD, in its crds/ directory: Helm
## installs it before the templates (VolumePools among them) and never
## upgrades or deletes it (docs/install.md says how it is upgraded)
CHART_CRD := charts/reclaimable/crds/reclaimable.github.io_volumepools.yaml
chart-crd:
	@mkdir -p $(dir $(CHART_CRD)) && sed -e '/^---$$/d' \
	    -e 's|^  name: \(.*\)$$|  name: \1\n  labels:\n    app.kubernetes.io/part-of: reclaimable|' \
	    manifests/base/crd/reclaimable.github.io_volumepools.yaml > $(CHART_CRD)

## verify-generate: fails when the generated files differ from what make generate makes
verify-generate:
	@before=$$(mktemp -d) && mkdir -p $$before/manifests/base && cp -r apis client $$before/ && cp -r manifests/base/crd $$before/manifests/base/ && cp $(CHART_CRD) $$before/chart-crd.yaml && \
	$(MAKE) -s generate >/dev/null && \
	if ! diff -r $$before/apis apis || ! diff -r $$before/client client || ! diff -r $$before/manifests/base/crd manifests/base/crd || ! diff $$before/chart-crd.yaml $(CHART_CRD); then \
		echo "Generated files are stale: run make generate and commit the result"; rm -rf $$before; exit 1; fi; rm -rf $$before

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
