# fleet-controller-manager build, test and demo entry points.
#
# Kubernetes binaries are built from the Go module proxy (test/tools is a
# separate module pinned to the same Kubernetes version as the product) into
# versioned folders under bin/, so a binary present at the right version is
# never rebuilt. Never add -trimpath: it defeats the shared build cache.

KUBE_VERSION  := v1.36.3
KUBE_MAJOR    := 1
KUBE_MINOR    := 36
ETCD_VERSION  := v3.6.8
KWOK_VERSION  := v0.8.0
# The ServiceMonitor and PrometheusRule CRDs deploy/monitoring is checked
# against, from the prometheus-operator module on the Go module proxy.
PROM_OPERATOR_VERSION := v0.80.1

BIN           := $(CURDIR)/bin
KUBE_BIN      := $(BIN)/kubernetes-$(KUBE_VERSION)
ETCD_BIN      := $(BIN)/etcd-$(ETCD_VERSION)
KWOK_BIN      := $(BIN)/kwok-$(KWOK_VERSION)-resume
CRD_BIN       := $(BIN)/prometheus-operator-crds-$(PROM_OPERATOR_VERSION)
CRDS          := monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml
GO            ?= go
GOFLAGS_BUILD ?=

VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
KUBE_LDFLAGS  := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
                 -X k8s.io/component-base/version.gitMajor=$(KUBE_MAJOR) \
                 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
                 -X k8s.io/component-base/version.gitTreeState=clean
FCM_LDFLAGS   := $(KUBE_LDFLAGS) \
                 -X github.com/fleet-controller-manager/fleet-controller-manager/cmd/fleet-controller-manager/app.fleetVersion=$(VERSION)

# pipefail in recipes: a test run piped into its summary fails with it.
SHELL         := /bin/bash

# Static binaries, without cgo, for the product and for Kubernetes' own
# binaries in bin/ alike: the fleet imports kube-controller-manager's
# packages at the same module versions as test/tools, so with cgo off on
# both sides the tools' build is mostly links of packages the fleet's build
# compiled (cgo on and off compile each package twice: 3,008 packages
# instead of about 5,400 on a cold machine). Kubernetes releases its
# binaries this way too. test-long's -race turns cgo back on; runc is the
# one tool that needs it (nsenter, seccomp).
export CGO_ENABLED := 0

# The container image (make image, make push): built by deploy/image from
# the static binaries, without a container daemon. Its tag and --version
# are both git describe's.
IMAGE           ?= fleet-controller-manager:$(VERSION)
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_SOURCE    ?= https://github.com/fleet-controller-manager/fleet-controller-manager
IMAGE_DIR       := $(CURDIR)/build/image
HOST_PLATFORM   := $(shell $(GO) env GOOS)/$(shell $(GO) env GOARCH)

KUBE_TOOLS    := kube-apiserver kube-controller-manager kube-scheduler kubectl

# Tests and the demo find every tool here.
export FCM_BIN_DIR := $(BIN)

.PHONY: node-tools test-node conformance-node all tools build image image-host push test test-long test-deps bench cluster run clean fuzz chaos conformance conformance-ci sim-sweep

# Kubernetes' own end-to-end tests of the controllers (test/tools/e2e: the
# apimachinery, apps, auth and network suites), at the controllers' version.
E2E_TEST      := $(KUBE_BIN)/e2e.test
# make conformance: which systems and which tests of test/conformance/selection.txt.
CONFORMANCE_SYSTEMS ?= kcm,fleet3
CONFORMANCE_SET     ?= all
# e2e.test processes at once per system (the tests mostly wait on the
# controllers); [Serial] tests run alone after them.
CONFORMANCE_PROCS   ?= 3

all: build

tools: $(addprefix $(BIN)/,$(KUBE_TOOLS) etcd kwok) $(BIN)/crds

$(CRD_BIN)/.done:
	@mkdir -p $(CRD_BIN)
	dir=$$(GOFLAGS= $(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROM_OPERATOR_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	  for c in $(CRDS); do install -m 0644 $$dir/example/prometheus-operator-crd/$$c $(CRD_BIN)/; done
	touch $@
$(BIN)/crds: $(CRD_BIN)/.done
	ln -sfn $(patsubst $(BIN)/%,%,$(CRD_BIN)) $@

# Each group of Kubernetes' binaries is one go build: one action graph
# compiles every package once and links each binary while the rest still
# compile, where a go build per binary waits for each link on one core.
# The control plane (with etcd, from the same module, built as server/v3
# names it) and the real node's (make test's node-tools).
CONTROL_PLANE_BINS := $(addprefix $(KUBE_BIN)/,$(KUBE_TOOLS)) $(ETCD_BIN)/etcd
$(CONTROL_PLANE_BINS) &:
	@rm -rf $(BIN)/.control-plane && mkdir -p $(KUBE_BIN) $(ETCD_BIN) $(BIN)/.control-plane
	cd test/tools && $(GO) build $(GOFLAGS_BUILD) -ldflags '$(KUBE_LDFLAGS)' -o $(BIN)/.control-plane/ \
	  $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_TOOLS)) go.etcd.io/etcd/server/v3
	mv $(BIN)/.control-plane/server $(ETCD_BIN)/etcd
	mv $(addprefix $(BIN)/.control-plane/,$(KUBE_TOOLS)) $(KUBE_BIN)/
	rmdir $(BIN)/.control-plane
NODE_BINS := $(KUBE_BIN)/kubelet $(KUBE_BIN)/agnhost
$(NODE_BINS) &:
	@mkdir -p $(KUBE_BIN)
	cd test/tools && $(GO) build $(GOFLAGS_BUILD) -ldflags '$(KUBE_LDFLAGS)' -o $(KUBE_BIN)/ \
	  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/test/images/agnhost

$(E2E_TEST):
	@mkdir -p $(KUBE_BIN)
	cd test/tools && $(GO) test -c $(GOFLAGS_BUILD) -ldflags '$(KUBE_LDFLAGS)' -o $@ ./e2e

# Upstream's end-to-end tests under kube-controller-manager and a fleet of
# three, side by side; fails if one passes under KCM and fails under the fleet.
conformance: tools build $(E2E_TEST)
	$(GO) run ./test/conformance -systems $(CONFORMANCE_SYSTEMS) -set $(CONFORMANCE_SET) -procs $(CONFORMANCE_PROCS) $(CONFORMANCE_ARGS)

# The tests that need containers that run, on a control plane whose one
# node is the real node: kube-controller-manager, then a fleet of three
# (one real node runs on the machine at a time).
conformance-node: tools build node-tools $(E2E_TEST)
	$(GO) run ./test/conformance -systems $(CONFORMANCE_SYSTEMS) -set node -procs $(CONFORMANCE_PROCS) $(CONFORMANCE_ARGS)

# The tests of the controllers whose pieces move, against a fleet of three.
conformance-ci: tools build $(E2E_TEST)
	$(GO) run ./test/conformance -systems fleet3 -set ci

# kwok has no built-in stages: the stage files shipped in its module are
# copied beside the binary (node-initialize, heartbeat with lease, and the fast
# pod stages) for test/localcluster to load.
KWOK_STAGES := node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
               pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml

# kwok is built from a copy of its module with test/tools/testdata/kwok/
# resume-watch.patch applied: its Pod watch resumes from the version it
# reached, as a kubelet's does, instead of at "0", which replays every Pod
# after each watch the apiserver closes (docs/benchmarks/kwok-resume/).
# git apply refuses a patch that no longer fits, so a new KWOK_VERSION fails
# here instead of building an old file into it; GIT_CEILING_DIRECTORIES
# keeps git from taking the copy for a folder of this repository.
KWOK_PATCH := $(CURDIR)/test/tools/testdata/kwok/resume-watch.patch
$(KWOK_BIN)/kwok: $(KWOK_PATCH)
	@mkdir -p $(KWOK_BIN)/stages
	dir=$$(cd / && GOFLAGS= $(GO) mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	  rm -rf $(KWOK_BIN)/src && cp -r $$dir $(KWOK_BIN)/src && chmod -R u+w $(KWOK_BIN)/src && \
	  cd $(KWOK_BIN)/src && GIT_CEILING_DIRECTORIES=$(KWOK_BIN) git apply $(KWOK_PATCH) && \
	  GOFLAGS= GOWORK=off $(GO) build -ldflags '-X sigs.k8s.io/kwok/pkg/consts.Version=$(patsubst v%,%,$(KWOK_VERSION))' -o $@ ./cmd/kwok && \
	  for s in $(KWOK_STAGES); do install -m 0644 kustomize/stage/$$s $(KWOK_BIN)/stages/; done

# The real node (test/localcluster's --real-node): a kubelet from the tools
# module, containerd and its runc shim, runc, the CNI plugins a bridge
# network needs, and the images its pods run, all built here from the Go
# module proxy and Debian's gcc, so no test pulls from a registry.
# containerd and the plugins build without cgo (no btrfs, devmapper or zfs
# snapshotters: overlayfs is what the node uses); runc needs cgo for its
# nsenter and seccomp (the RuntimeDefault profile pods ask for, with
# Debian's libseccomp-dev), and builds without libpathrs (a Rust library).
CONTAINERD_VERSION  := v2.4.2
RUNC_VERSION        := v1.5.3
CNI_PLUGINS_VERSION := v1.10.0
CONTAINERD_BIN      := $(BIN)/containerd-$(CONTAINERD_VERSION)
RUNC_BIN            := $(BIN)/runc-$(RUNC_VERSION)
CNI_BIN             := $(BIN)/cni-plugins-$(CNI_PLUGINS_VERSION)
CNI_PLUGINS         := main/bridge main/loopback ipam/host-local meta/portmap
NODE_IMAGES_DIR     := $(BIN)/node-images-$(KUBE_VERSION)
module_dir = $$(cd / && GOFLAGS= $(GO) mod download -json $(1) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')
# Installs Debian packages that are missing (as root, or with sudo).
apt_install = missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
  if [ -n "$$missing" ]; then echo "installing$$missing"; sudo= ; [ "$$(id -u)" = 0 ] || sudo=sudo; \
    export DEBIAN_FRONTEND=noninteractive; \
    $$sudo apt-get install -y -q $$missing >/dev/null || { $$sudo apt-get update -q && $$sudo apt-get install -y -q $$missing >/dev/null; }; fi

$(CONTAINERD_BIN)/.done:
	@mkdir -p $(CONTAINERD_BIN)
	dir=$(call module_dir,github.com/containerd/containerd/v2@$(CONTAINERD_VERSION)) && cd $$dir && \
	  for c in containerd containerd-shim-runc-v2 ctr; do \
	    CGO_ENABLED=0 GOFLAGS= GOWORK=off $(GO) build -tags 'no_btrfs no_devmapper no_zfs' \
	      -ldflags '-X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)' -o $(CONTAINERD_BIN)/$$c ./cmd/$$c || exit 1; \
	  done
	touch $@
$(RUNC_BIN)/runc:
	@mkdir -p $(RUNC_BIN)
	@$(call apt_install,libseccomp-dev)
	dir=$(call module_dir,github.com/opencontainers/runc@$(RUNC_VERSION)) && cd $$dir && \
	  CGO_ENABLED=1 GOFLAGS= GOWORK=off $(GO) build -tags 'seccomp urfave_cli_no_docs' \
	    -ldflags '-X main.version=$(patsubst v%,%,$(RUNC_VERSION))' -o $@ .
$(CNI_BIN)/.done:
	@mkdir -p $(CNI_BIN)
	dir=$(call module_dir,github.com/containernetworking/plugins@$(CNI_PLUGINS_VERSION)) && cd $$dir && \
	  for p in $(CNI_PLUGINS); do \
	    CGO_ENABLED=0 GOFLAGS= GOWORK=off $(GO) build -o $(CNI_BIN)/$$(basename $$p) ./plugins/$$p || exit 1; \
	  done
	touch $@
# The images: pause (upstream's pause.c, static), agnhost, busybox
# (Debian's busybox-static) and kube-controller-manager (for the
# migration from its static pod), as OCI archives under the names
# upstream's tests and kubeadm give them (test/nodeimages).
$(NODE_IMAGES_DIR)/.done: $(KUBE_BIN)/agnhost $(KUBE_BIN)/kube-controller-manager
	@mkdir -p $(NODE_IMAGES_DIR)
	@$(call apt_install,busybox-static)
	dir=$(call module_dir,k8s.io/kubernetes@$(KUBE_VERSION)) && \
	  gcc -Os -static -DVERSION=$(KUBE_VERSION) -o $(NODE_IMAGES_DIR)/pause $$dir/build/pause/linux/pause.c && \
	  $(GO) run ./test/nodeimages -out $(NODE_IMAGES_DIR) -pause $(NODE_IMAGES_DIR)/pause \
	  -agnhost $(KUBE_BIN)/agnhost -agnhost-porter $$dir/test/images/agnhost/porter -busybox $$(command -v busybox) \
	  -kube-controller-manager $(KUBE_BIN)/kube-controller-manager -kube-version $(KUBE_VERSION)
	touch $@

node-tools: $(BIN)/kubelet $(CONTAINERD_BIN)/.done $(RUNC_BIN)/runc $(CNI_BIN)/.done $(NODE_IMAGES_DIR)/.done
	ln -sfn $(patsubst $(BIN)/%,%,$(CONTAINERD_BIN)) $(BIN)/containerd
	ln -sfn $(patsubst $(BIN)/%,%,$(RUNC_BIN)) $(BIN)/runc
	ln -sfn $(patsubst $(BIN)/%,%,$(CNI_BIN)) $(BIN)/cni
	ln -sfn $(patsubst $(BIN)/%,%,$(NODE_IMAGES_DIR)) $(BIN)/node-images

# Keep the versioned binaries: they are intermediate files of the pattern
# rules below, which make would otherwise delete after linking.
.SECONDARY:

# Stable names point at the versioned binaries.
$(BIN)/%: $(KUBE_BIN)/%
	ln -sf $(patsubst $(BIN)/%,%,$<) $@
$(BIN)/etcd: $(ETCD_BIN)/etcd
	ln -sf $(patsubst $(BIN)/%,%,$<) $@
$(BIN)/kwok: $(KWOK_BIN)/kwok
	ln -sf $(patsubst $(BIN)/%,%,$<) $@

build: $(BIN)/fleet-controller-manager

# Always handed to go build: the Go cache decides what is stale.
.PHONY: $(BIN)/fleet-controller-manager $(BIN)/fleet-recording-replica
$(BIN)/fleet-controller-manager:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_BUILD) -ldflags '$(FCM_LDFLAGS)' -o $@ ./cmd/fleet-controller-manager

# The release before this one, which the rolling upgrade test (make
# test-long) upgrades from and rolls back to: its tagged commit's source,
# from this repository's history, built into bin/ once. The commit is
# pinned beside the tag, so a clone without tags builds it too (a shallow
# clone cannot: it says so).
PREVIOUS_RELEASE        := v0.2.0
PREVIOUS_RELEASE_COMMIT := 8fedf5c44fa973af7107242c87224dbb15e1c510
PREVIOUS_RELEASE_BIN    := $(BIN)/fleet-controller-manager-$(PREVIOUS_RELEASE)
$(PREVIOUS_RELEASE_BIN):
	@git cat-file -e '$(PREVIOUS_RELEASE_COMMIT)^{commit}' 2>/dev/null || { echo "commit $(PREVIOUS_RELEASE_COMMIT) of release $(PREVIOUS_RELEASE) is not in this clone (a shallow clone? git fetch --unshallow)"; exit 1; }
	@if git rev-parse -q --verify 'refs/tags/$(PREVIOUS_RELEASE)' >/dev/null && [ "$$(git rev-parse '$(PREVIOUS_RELEASE)^{commit}')" != "$$(git rev-parse '$(PREVIOUS_RELEASE_COMMIT)^{commit}')" ]; then echo "tag $(PREVIOUS_RELEASE) is not commit $(PREVIOUS_RELEASE_COMMIT)"; exit 1; fi
	rm -rf build/release-$(PREVIOUS_RELEASE) && mkdir -p build/release-$(PREVIOUS_RELEASE) $(BIN)
	git archive $(PREVIOUS_RELEASE_COMMIT) | tar -x -C build/release-$(PREVIOUS_RELEASE)
	cd build/release-$(PREVIOUS_RELEASE) && $(GO) build $(GOFLAGS_BUILD) -ldflags '$(KUBE_LDFLAGS) -X github.com/fleet-controller-manager/fleet-controller-manager/cmd/fleet-controller-manager/app.fleetVersion=$(PREVIOUS_RELEASE)' -o $@.tmp ./cmd/fleet-controller-manager
	mv $@.tmp $@
	rm -rf build/release-$(PREVIOUS_RELEASE)

# The handover tests' replica: the product's command with recording pieces
# in place of controllers (test/recordingpieces).
$(BIN)/fleet-recording-replica:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_BUILD) -ldflags '$(FCM_LDFLAGS)' -o $@ ./test/recordingpieces/cmd/fleet-recording-replica

# One image for every platform in IMAGE_PLATFORMS under build/image: an OCI
# layout (oci/), the same as one tar (podman load, ctr import, docker load)
# and a Docker archive per platform. The binaries are stripped (-s -w):
# 96 MB instead of 137 MB on linux/amd64 (32 MB compressed in the image).
# `make push IMAGE=<registry>/<name>:<tag>` also pushes the index.
platform_dir = $(IMAGE_DIR)/$(subst /,-,$(1))
image:
	@mkdir -p $(IMAGE_DIR)
	$(foreach p,$(IMAGE_PLATFORMS),GOOS=$(word 1,$(subst /, ,$(p))) GOARCH=$(word 2,$(subst /, ,$(p))) \
	  $(GO) build $(GOFLAGS_BUILD) -ldflags '$(FCM_LDFLAGS) -s -w' -o $(call platform_dir,$(p))/fleet-controller-manager ./cmd/fleet-controller-manager && ) true
	cd deploy/image && $(GO) run . -out $(IMAGE_DIR) -image $(IMAGE) -version $(VERSION) \
	  -revision $$(git rev-parse HEAD 2>/dev/null) -created $$(git log -1 --format=%ct 2>/dev/null || echo 0) -source $(IMAGE_SOURCE) \
	  $(foreach p,$(IMAGE_PLATFORMS),-binary $(p)=$(call platform_dir,$(p))/fleet-controller-manager) $(IMAGE_ARGS)

# The image for this machine's platform only: what the e2e test of the
# manifests runs.
image-host:
	$(MAKE) image IMAGE_PLATFORMS=$(HOST_PLATFORM)

push:
	$(MAKE) image IMAGE_ARGS=-push

# Unit tests first (seconds), then the e2e tests against a real control
# plane (they are behind the e2e build tag so `go test ./...` stays fast),
# one of them on the real node (node-tools): the fleet's image deployed as
# deploy/deployment ships it, and Jobs whose containers exit by code.
# Debian packages the e2e tests drive: headless Chromium (the /debug/fleet
# page) and Prometheus (scraping a fleet, evaluating the dashboards and
# alerts). Installed only when missing.
TEST_PACKAGES := chromium prometheus
test-deps:
	@missing=""; for p in $(TEST_PACKAGES); do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  sudo= ; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$sudo apt-get install -y -q $$missing >/dev/null || { $$sudo apt-get update -q && $$sudo apt-get install -y -q $$missing >/dev/null; }; \
	fi

# Each go test runs through test/testsummary, which prints the output as
# -v would and ends with the slowest tests and the time per package. The
# e2e tests run at once, in lanes sized to the machine
# (test/e2e/lanes_test.go); -parallel only has to let every lane fill.
test: tools build $(BIN)/fleet-recording-replica $(BIN)/fleet-controller-manager-planted-stuck_load image-host test-deps node-tools
	$(GO) vet -tags e2e ./...
	$(GO) vet -tags 'e2e long node' ./test/e2e/
	# The codebase's limits (test/codestats/limits.go): fails naming each one
	# past and its offenders.
	$(GO) run ./test/codestats -check
	cd deploy/image && $(GO) vet ./... && $(GO) test -count=1 ./...
	set -o pipefail; $(GO) test -count=1 -json ./... | $(GO) run ./test/testsummary
	# The owned-cache simulation ran with the unit tests above.
	set -o pipefail; $(GO) test -count=1 -p 1 -parallel 64 -tags e2e -json -timeout 60m -skip '^TestOwnedCacheSimulation$$' ./informers/ ./test/e2e/... | $(GO) run ./test/testsummary

# The must-show sizes, beyond make test's: the unit tests under -race,
# 1,000 simulated schedules of the handover protocol, 50 partition moves
# under load, a killed replica's namespaces served within lease + 3 s (a
# bound on time) and a rolling upgrade and rollback of three replicas (two
# minutes of a heavy lane): the long build tag keeps both out of make test,
# which vets them; the real node's tests (make test-node); and a 20-minute
# chaos soak with a random seed (printed).
test-long: tools build $(BIN)/fleet-recording-replica $(PREVIOUS_RELEASE_BIN) test-deps node-tools image-host
	set -o pipefail; CGO_ENABLED=1 $(GO) test -count=1 -race -json ./... | $(GO) run ./test/testsummary
	set -o pipefail; $(GO) test -count=1 -json ./shard/ -run '^TestProtocolSimulation' -args -sim.runs=1000 | $(GO) run ./test/testsummary
	set -o pipefail; $(GO) test -count=1 -json -parallel 16 -timeout 60m ./informers/ -run '^TestOwnedCacheSimulation$$' -args -ownedsim.runs=300 | $(GO) run ./test/testsummary
	set -o pipefail; PARTITION_MOVES=50 $(GO) test -count=1 -tags e2e -json -timeout 60m ./test/e2e/ -run '^TestPartitionMovesUnderLoad$$' | $(GO) run ./test/testsummary
	set -o pipefail; FCM_PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) $(GO) test -count=1 -tags 'e2e long' -json -timeout 20m ./test/e2e/ -run '^(TestKillServesVictimNamespacesWithinLease|TestRollingUpgradeAndRollback|TestNamespaceFirstMoments|TestPlacementByWeight)$$' | $(GO) run ./test/testsummary
	$(MAKE) test-node
	$(MAKE) chaos DURATION=20
	$(MAKE) conformance

# Every test on the real node: make test's, and those behind the node
# build tag, with deploy/'s two overlays: the migration from a static-pod
# KCM and back, a rolling update, a drain, every fleet pod deleted. One
# real node runs on a machine at a time, so they follow one another
# (about 11 minutes).
test-node: tools build node-tools image-host
	set -o pipefail; $(GO) test -count=1 -tags 'e2e node' -json -parallel 8 -timeout 40m ./test/e2e/ -run '^TestRealNode' | $(GO) run ./test/testsummary

# Fresh seeds of the owned-cache simulation, one process per seed (a seed
# that passed once proves little): SWEEP_SEEDS of them (default 200),
# SWEEP_PROCS at once (12: a schedule mostly waits), each within 200 s:
# more than a long schedule (46 s seen) and its check's own 90-s wait for
# quiescence, so a stuck wait fails naming what it waits for instead of
# being killed as hung.
# Prints every seed that failed or hung, with its replay command, the
# moves of every kind the schedules made, summed, and the count of each
# outcome; fails if any did. SWEEP_REPEAT=<seed> runs one
# seed that many times instead (SWEEP_SEEDS of them);
# SWEEP_ARGS='-ownedsim.plant=<rule>' plants a rule out, to show some seed
# catches it.
SWEEP_SEEDS ?= 200
SWEEP_PROCS ?= 12
sim-sweep:
	@mkdir -p build/sim-sweep
	$(GO) test -c -o build/sim-sweep/informers.test ./informers
	@cd informers && rm -f ../build/sim-sweep/results ../build/sim-sweep/*.log && \
	  for i in $$(seq $(SWEEP_SEEDS)); do \
	    if [ -n "$(SWEEP_REPEAT)" ]; then echo $(SWEEP_REPEAT); else echo $$(( $$(od -An -N7 -tu8 /dev/urandom) + 1 )); fi; \
	  done | xargs -P $(SWEEP_PROCS) -I{} sh -c \
	    'timeout -s QUIT 200 ../build/sim-sweep/informers.test -test.run "^TestOwnedCacheSimulation$$" -test.v -test.timeout 3m -ownedsim.seed={} $(SWEEP_ARGS) > ../build/sim-sweep/{}.$$$$.log 2>&1; echo "{} $$?" >> ../build/sim-sweep/results'
	@cat build/sim-sweep/*.log | sed -n 's/.* schedules: //p' | tr ',' '\n' | awk 'NF >= 2 { c = $$NF; $$NF = ""; sub(/^ +/, ""); sub(/ +$$/, ""); n[$$0] += c } END { for (k in n) print k, n[k] }' | sort | paste -sd, - | sed 's/,/, /g; s/^/moves: /'
	@awk '$$2 != 0 { print "seed " $$1 (($$2 == 124 || $$2 == 131) ? " hung" : " failed") ": go test ./informers -run ^TestOwnedCacheSimulation$$ -args -ownedsim.seed=" $$1 }' build/sim-sweep/results
	@awk '{ n[$$2 == 0 ? "passed" : ($$2 == 124 || $$2 == 131) ? "hung" : "failed"]++ } END { printf "%d passed, %d failed, %d hung\n", n["passed"], n["failed"], n["hung"]; exit (n["failed"] + n["hung"] > 0) }' build/sim-sweep/results

# What make cluster and make run start: not kube-controller-manager, which
# only the tests and the bench run beside the fleet, though the control
# plane's one go build links it too (the fleet's own build compiles every
# package it needs).
CLUSTER_TOOLS := $(addprefix $(BIN)/,kube-apiserver kube-scheduler kubectl etcd kwok)

cluster: $(CLUSTER_TOOLS)
	$(GO) run ./test/localcluster/cmd/localcluster --kubeconfig-out .local/kubeconfig --scheduler --kwok-nodes 3

# The fleet on a local control plane: 3 replicas, a sample workload, and a
# table of who owns what whenever it changes. Ctrl-C stops everything.
run: $(CLUSTER_TOOLS) build
	$(GO) run ./test/localcluster/cmd/localcluster --kubeconfig-out .local/kubeconfig --scheduler --kwok-nodes 3 --fleet-replicas 3 --sample-workload

# Fleet vs upstream kube-controller-manager, side by side (docs/benchmarks/matrix/).
# QUICK=1: a smaller workload at default limits, under 10 minutes.
bench: tools build test-deps
	$(GO) run ./test/bench -out docs/benchmarks/matrix $(if $(QUICK),-quick) $(BENCH_ARGS)

# The chaos soak (TestChaos in test/e2e): DURATION minutes (default 20) of
# seeded faults on a fleet of three running the real controllers, under a
# changing workload; every write is checked at the end. The seed is
# printed; SEED=<n> replays a run. SCHEDULE=restarts follows each network
# fault of a replica with an etcd or kube-apiserver restart.
# SCHEDULE=gray runs only the faults that are not one clean fault;
# KINDS=<kind>,<kind> names the kinds. FLEET_ARGS=<flag>,<flag> adds flags
# to every replica (other settings). PLACEMENT=count|weight fixes the
# placement, which otherwise follows the seed: an odd seed places by
# count, an even one by weight (the default) with a 10 s hold. PLANT=<name> runs a build with a planted fault
# (membership/plants.go), to show the soak catches it.
DURATION ?= 20
chaos: tools build $(if $(PLANT),$(BIN)/fleet-controller-manager-planted-$(PLANT))
	seed=$${SEED:-$$(date +%s)}; echo "chaos: seed $$seed"; \
	  CHAOS_SEED=$$seed CHAOS_DURATION=$(DURATION)m CHAOS_SCHEDULE=$(SCHEDULE) CHAOS_KINDS=$(KINDS) CHAOS_FLEET_ARGS=$(FLEET_ARGS) CHAOS_PLACEMENT=$(PLACEMENT) \
	  CHAOS_FLEET_BIN=$(if $(PLANT),$(abspath $(BIN))/fleet-controller-manager-planted-$(PLANT)) \
	  $(GO) test -count=1 -tags e2e -v -run '^TestChaos$$' -timeout $$(( $(DURATION) + 25 ))m ./test/e2e/

# A build with one planted fault (membership/plants.go), for make chaos
# PLANT=<name>.
PLANTS       := unbounded_authority unconfirmed_expiry no_relist_on_expiry table_outside_view stuck_load
PLANTED_BINS := $(PLANTS:%=$(BIN)/fleet-controller-manager-planted-%)
.PHONY: $(PLANTED_BINS)
$(PLANTED_BINS): $(BIN)/fleet-controller-manager-planted-%:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_BUILD) -tags plant_$* -ldflags '$(FCM_LDFLAGS)' -o $@ ./cmd/fleet-controller-manager

fuzz:
	$(GO) test ./membership -run '^$$' -fuzz FuzzParseLeaseState -fuzztime 60s

clean:
	rm -rf $(BIN) .local build
