# argocd-pull — every target installs what it needs; see README.md.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := build

BIN := $(CURDIR)/bin
export ARGOCD_PULL_BIN_DIR := $(BIN)

# Pinned tool versions.
ARGOCD_VERSION         := v3.2.11
GOLANGCI_LINT_VERSION  := v2.6.2
CONTROLLER_GEN_VERSION := v0.19.0
HELM_VERSION           := v4.3.1

GO_TEST_FLAGS ?= -race -timeout 25m
PKGS ?= ./...

# ---------------------------------------------------------------------------------------------------------
# setup: Debian packages and the pinned real components, built from the Go module proxy into bin/.

.PHONY: setup
setup: system-deps $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kwok $(BIN)/placement $(BIN)/helm argocd-bins ## Install and build everything the tests need

.PHONY: system-deps
system-deps:
	@hack/setup-system.sh

$(BIN)/etcd: hack/etcd/go.mod hack/etcd/go.sum
	@echo "==> building etcd (hack/etcd)"
	cd hack/etcd && go build -o $@ go.etcd.io/etcd/server/v3

$(BIN)/kube-apiserver: hack/kubernetes/go.mod hack/kubernetes/go.sum
	@echo "==> building kube-apiserver (hack/kubernetes; a few minutes the first time)"
	cd hack/kubernetes && go build -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/kube-controller-manager: hack/kubernetes/go.mod hack/kubernetes/go.sum
	@echo "==> building kube-controller-manager (hack/kubernetes)"
	cd hack/kubernetes && go build -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

$(BIN)/kube-scheduler: hack/kubernetes/go.mod hack/kubernetes/go.sum
	@echo "==> building kube-scheduler (hack/kubernetes)"
	cd hack/kubernetes && go build -o $@ k8s.io/kubernetes/cmd/kube-scheduler

$(BIN)/kwok: hack/kwok/go.mod hack/kwok/go.sum
	@echo "==> building KWOK (hack/kwok)"
	cd hack/kwok && go build -o $@ sigs.k8s.io/kwok/cmd/kwok

$(BIN)/placement: hack/placement/go.mod hack/placement/go.sum
	@echo "==> building OCM's placement controller (hack/placement)"
	cd hack/placement && go build -o $@ open-cluster-management.io/ocm/cmd/placement

# Helm 4 for the chart tests (helm lint, helm template) and for users of charts/; hack/helm pins HELM_VERSION.
$(BIN)/helm: hack/helm/go.mod hack/helm/go.sum
	@echo "==> building helm $(HELM_VERSION) (hack/helm)"
	@grep -q 'helm.sh/helm/v4 $(HELM_VERSION)$$' hack/helm/go.mod || { echo "hack/helm/go.mod does not require helm.sh/helm/v4 $(HELM_VERSION)"; exit 1; }
	cd hack/helm && go build -ldflags "-X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" -o $@ helm.sh/helm/v4/cmd/helm

$(BIN)/kubectl: hack/kubernetes/go.mod hack/kubernetes/go.sum
	@echo "==> building kubectl (hack/kubernetes)"
	cd hack/kubernetes && go build -o $@ k8s.io/kubernetes/cmd/kubectl

ARGOCD_ROLES := argocd-application-controller argocd-repo-server argocd-applicationset-controller argocd-server

.PHONY: argocd-bins
argocd-bins: $(BIN)/argocd $(addprefix $(BIN)/,$(ARGOCD_ROLES))

# Argo CD's web UI, built from the ui/ sources of the same module with yarn and the npm registry
# (hack/argocd-ui/README.md), then embedded into the binary: argocd-server serves the UI it was built with.
ARGOCD_UI := $(BIN)/argocd-ui-$(ARGOCD_VERSION)
ARGOCD_UI_INPUTS := $(shell find hack/argocd-ui -type f ! -name README.md)

.PHONY: argocd-ui
argocd-ui: $(ARGOCD_UI)/index.html ## Build Argo CD's web UI into bin/ (cached)

$(ARGOCD_UI)/index.html: $(ARGOCD_UI_INPUTS)
	@echo "==> building Argo CD's web UI $(ARGOCD_VERSION) (hack/argocd-ui; about ten minutes the first time)"
	hack/argocd-ui/build.sh $(ARGOCD_VERSION) $(BIN)/.cache/argocd-ui-$(ARGOCD_VERSION) $(ARGOCD_UI)

$(BIN)/argocd: hack/argocd/go.mod hack/argocd/go.sum hack/argocd/build.sh $(ARGOCD_UI)/index.html
	@echo "==> building Argo CD $(ARGOCD_VERSION) with its web UI (hack/argocd; a few minutes the first time)"
	hack/argocd/build.sh $(ARGOCD_VERSION) $(ARGOCD_UI) $(BIN)/.cache/argo-cd-$(ARGOCD_VERSION) $@

$(addprefix $(BIN)/,$(ARGOCD_ROLES)): $(BIN)/argocd
	ln -sf argocd $@

$(BIN)/golangci-lint:
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(BIN)/controller-gen:
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# ---------------------------------------------------------------------------------------------------------
# build, test, lint

# kustomize's Go-plugin loader imports package plugin, which makes the linker export every symbol (+50 MB);
# argocd-pull cmp never loads Go plugins.
GO_BUILD_TAGS := kustomize_disable_go_plugin_support

.PHONY: build
build: ## Build bin/argocd-pull
	go build -tags $(GO_BUILD_TAGS) -o $(BIN)/argocd-pull ./cmd/argocd-pull

# The container image, ghcr.io/argocd-pull/argocd-pull: static binaries for linux/amd64 and linux/arm64 with a CA
# bundle on an empty base, user 65532, written as an OCI image layout without a container engine
# (hack/image/build.sh). VERSION=v1.2.3 sets the tag and version (default: git describe).
IMAGE_DIR ?= $(BIN)/image

.PHONY: image
image: ## Build the multi-platform OCI image layout into bin/image
	hack/image/build.sh $(IMAGE_DIR)

# Reads the image back (index, both platforms' configuration and files) and runs its amd64 binary. make test runs
# it too, building the image in a temporary directory: about a minute once the build cache holds both platforms'
# packages, 10 minutes of CPU the first time.
.PHONY: test-image
test-image: image ## Build bin/image and test it (hack/image)
	cd hack/image && IMAGE_LAYOUT=$(IMAGE_DIR) go test -count=1 ./...

# Tests whose unmodified sdk-go clients reconnect in the test process skip a -race build (sdk-go v1.3.0 races
# with itself on reconnection, docs/server.md), and so do allocation measurements (a -race build's sync.Pool drops
# what it is given at random); the go tests after the first run them without it.
.PHONY: test
test: setup build ## Run every test (unit, apiserver, PostgreSQL, end to end, charts, the image)
	go test $(GO_TEST_FLAGS) $(PKGS)
	go test -count=1 -timeout 10m -run '^TestStuckClientRestarted$$' ./internal/sim
	go test -count=1 -timeout 10m -run '^(TestUnreportedClosedConnection|TestStuckAgentClientRestarted)$$' ./internal/workclient
	go test -count=1 -run '^TestHashJSONAllocations$$' ./internal/argocd
	cd hack/image && go test $(GO_TEST_FLAGS) ./...

CHAOS_FLAGS ?=

.PHONY: chaos
chaos: setup ## Run the fault matrix on real processes (about half an hour); writes its table into docs/reliability.md
	go run ./test/chaos -doc docs/reliability.md $(CHAOS_FLAGS)

DEMO_DIR ?= $(CURDIR)/.demo
DEMO_FLAGS ?=

.PHONY: demo
demo: setup build $(BIN)/kubectl ## Bring a whole fleet up on loopback, run an ApplicationSet through it, leave it running (DEMO_FLAGS=--cmp: the CMP variant)
	$(BIN)/argocd-pull demo --detach --dir $(DEMO_DIR) $(DEMO_FLAGS)

.PHONY: demo-down
demo-down: ## Stop the fleet of make demo
	@if [ -x $(BIN)/argocd-pull ]; then $(BIN)/argocd-pull demo down --dir $(DEMO_DIR); else echo "no demo"; fi

BENCH_FLAGS ?=

.PHONY: bench
bench: setup ## Run the 150,000-Application benchmark (15,000 in both transports, 150,000 in the Maestro mode); writes docs/bench
	go run ./test/bench -out docs/bench $(BENCH_FLAGS)

.PHONY: lint
lint: $(BIN)/golangci-lint ## Run golangci-lint
	$(BIN)/golangci-lint run ./...

.PHONY: generate
generate: $(BIN)/controller-gen ## Generate deepcopy, CRDs and RBAC from markers, and the hub chart's copies of them
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=config/crd
	$(BIN)/controller-gen rbac:roleName=argocd-pull-controller paths=./internal/... output:rbac:artifacts:config=config/rbac
	@# The hub chart carries the same CRDs (crds/, which Helm installs first) and the controller's rules
	@# (files/, which its ClusterRole template reads); test/charts fails when they differ from config/.
	rm -f charts/argocd-pull/crds/*.yaml
	cp config/crd/*.yaml charts/argocd-pull/crds/
	cp config/rbac/role.yaml charts/argocd-pull/files/controller-clusterrole.yaml

.PHONY: verify
verify: generate ## Regenerate and fail if the tree changed
	go mod tidy
	@git diff --exit-code -- api config charts go.mod go.sum || { echo "generated files are out of date: run make generate && go mod tidy"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { git status --short -- api config charts; echo "generated files are not committed: run make generate and add them"; exit 1; }

.PHONY: help
help:
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "%-12s %s\n", $$1, $$2}'
