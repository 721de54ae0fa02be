# xdpshield. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
KERNELS ?= 5.10 6.1 6.12 7.2

.PHONY: help demo build test test-unpriv test-priv test-storm generate check-generate lint bench bench-live study study-quick vmtest soak kernels-repin container-images container-test gate gate-update gate-update-from gate-teeth gate-speed-clean commits

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

demo: ## the main job: a storm against the shield in throwaway namespaces (root); JSON in out/storm.json
	@ci/deps.sh
	@mkdir -p out
	$(GO) run ./cmd/shieldlab storm -json out/storm.json

build: ## out/bin/shield, stamped with its revision (shield_build_info) whatever GOFLAGS says
	$(GO) build -buildvcs=true -o out/bin/shield ./cmd/shield

test: test-unpriv test-priv test-storm container-test ## every test: unprivileged with -race, privileged, then the storms alone; installs missing packages

# As root, the test binaries of the unprivileged pass run as nobody
# (setpriv through go test -exec): what needs no privilege is proven so.
test-unpriv: ## the unprivileged pass: -race -short (no VM boots), privileged tests skip (binaries run as nobody under root)
	@ci/deps.sh
	@if [ "$$(id -u)" -eq 0 ]; then exec=(-exec "setpriv --reuid=65534 --regid=65534 --clear-groups --"); else exec=(); fi; \
	echo "env -u SHIELD_REQUIRE_PRIV $(GO) test -count=1 -race -short -timeout 30m $${exec[*]} ./..."; \
	env -u SHIELD_REQUIRE_PRIV $(GO) test -count=1 -race -short -timeout 30m "$${exec[@]}" ./... && \
	env -u SHIELD_REQUIRE_PRIV $(GO) -C e2e/container test -count=1 -race -short -timeout 30m "$${exec[@]}" ./...

test-priv: ## the privileged pass of all but the storms, packages side by side (root; SHIELD_REQUIRE_PRIV=1 makes every privilege skip a failure)
	@ci/deps.sh
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/e2e\(/storm\|/parts\)\?$$')

# The storms run alone: go test ./... runs packages side by side, and a
# storm's latency budget would then measure cmd/shield's million-source
# tests as much as the shield. The storm's own packages (e2e/storm's
# generators, e2e/parts) run here too, one package at a time (-p 1).
# ./e2e/... leaves out e2e/container, a module of its own.
test-storm: ## the namespace storms (root), alone; then the workbench's browser test with the real storm started from the page
	@ci/deps.sh
	$(GO) test -count=1 -p 1 -timeout 20m ./e2e/...
	WORKBENCH_REAL_STORM=1 $(GO) test -count=1 -timeout 10m -run '^TestBrowser$$' ./workbench

container-images: ## the shield, edge and storm images FROM scratch (static binaries) on the engine DOCKER_HOST names
	@mkdir -p out/container
	CGO_ENABLED=0 $(GO) build -trimpath -o out/container/shield ./cmd/shield
	CGO_ENABLED=0 $(GO) build -trimpath -o out/container/shieldlab ./cmd/shieldlab
	cp e2e/container/Dockerfile out/container/Dockerfile
	for t in shield edge storm; do docker build -q --target $$t -t xdps-$$t:lane out/container || exit 1; done

# The container lane runs alone, as the storms do. It is a module of its
# own (e2e/container/go.mod) so that testcontainers-go and the moby client
# stay out of the product's go.mod.
container-test: ## the container lane (root): its own dockerd, the images, capabilities, the storm in containers
	@ci/deps.sh
	$(GO) -C e2e/container test -count=1 -v -timeout 20m ./...

commits: ## check the commit messages of RANGE (default origin/main..HEAD) against CONTRIBUTING.md
	ci/commits.sh $(RANGE)

generate: ## rebuild the bpf2go output (clang-14 as pinned in bpf/gen.go, libbpf-dev)
	@ci/deps.sh
	$(GO) generate ./bpf/...

check-generate: generate ## fail if the committed bpf2go output is stale
	@git diff --exit-code --stat -- bpf/ || { echo "generated files are stale: run make generate and commit" >&2; exit 1; }

# actionlint checks .github/workflows (and their scripts with shellcheck,
# which ci/deps.sh installs); go run fetches this version through the
# module proxy.
ACTIONLINT_VERSION ?= v1.7.12

lint: ## gofmt, go vet (the teeth test too), staticcheck (pinned in go.mod), go mod tidy in both modules, actionlint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting" >&2; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags teeth ./vmtest/gate
	$(GO) tool staticcheck ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit" >&2; exit 1; }
	$(GO) -C e2e/container vet ./...
	sc=$$($(GO) tool -n staticcheck) && cd e2e/container && $$sc ./...
	@$(GO) -C e2e/container mod tidy -diff || { echo "e2e/container/go.mod/go.sum are not tidy: run go mod tidy there and commit" >&2; exit 1; }
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

bench: ## the shield's simulator benchmarks (shield/datapath): ns/packet per path next to an XDP_DROP reference, then the live path beside test_run (bench-live, root)
	$(GO) test -run '^$$' -bench . -benchtime 2000000x ./shield/datapath
	$(MAKE) bench-live

bench-live: ## live XDP path (veth + live-frames generator, namespaces) beside test_run, ns/frame per program (~90 s, root)
	$(GO) test -run '^$$' -bench LiveCost -benchtime 5x ./e2e

study: ## the cost study, as root (about 18 min here with the peers and lists sections): out/study, and docs/study.md with its plots
	@ci/deps.sh
	$(GO) build -o out/bin/shieldlab ./cmd/shieldlab
	out/bin/shieldlab study -out out/study -docs docs

study-quick: ## the study in short (CI, about 80 s: one run of each): fails if a configuration produced no numbers
	@ci/deps.sh
	$(GO) build -o out/bin/shieldlab ./cmd/shieldlab
	out/bin/shieldlab study -quick -out out/study-quick

# The VM matrix (vmtest/): packages run in every kernel, and flags for each
# test binary (-test.short shortens the storms).
# (./e2e/... leaves out the container lane, a module of its own: it needs a
# Docker engine, which the VMs' initramfs has not.)
VMTEST_PKGS ?= ./sim/... ./e2e/... ./shield/... ./api ./service ./nft ./lb/... ./internal/topo/... ./internal/pinfs ./internal/testutil ./probe/... ./l7/... ./xdplb
VMTEST_FLAGS ?= -test.short -test.v -test.timeout=10m
VM_CPUS ?= 2
# Kernels booted at once: under TCG a VM keeps one host thread busy.
VMS ?= 2
SOAK_RUNS ?= 5

vmtest: ## run the suites in qemu on each of $(KERNELS); matrix and JSON in out/vmtest
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest matrix -kernels "$(KERNELS)" -cpus $(VM_CPUS) -vms $(VMS) -testflags "$(VMTEST_FLAGS)" -out out/vmtest $(VMTEST_PKGS)

soak: ## the short storm $(SOAK_RUNS) times per kernel of $(KERNELS) in qemu ($(VM_CPUS) vCPUs): pass counts per kernel
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest matrix -kernels "$(KERNELS)" -cpus $(VM_CPUS) -runs $(SOAK_RUNS) -out out/soak \
		-testflags "-test.short -test.v -test.timeout=5m -test.run ^TestScenario" ./e2e/

kernels-repin: ## re-resolve fixtures/kernels.lock: each suite's current cloud-amd64 kernel
	$(GO) run ./vmtest/cmd/vmtest repin -kernels "$(KERNELS)"

# The regression gate (vmtest/gate): behaviour (GATE_PKGS, in the VMs and
# on the host, and the shield's data-plane tests again with shield_compat),
# verifier complexity and speed on the host and on every kernel of
# $(KERNELS), against fixtures/gate/baseline.json. GATE_PKGS is
# vmtest/gate.Packages (TestPackagesAgree).
GATE_PKGS ?= ./sim ./shield ./shield/datapath
GATE_FLAGS ?=

gate: ## the regression gate on the host and $(KERNELS) against fixtures/gate/baseline.json; report in out/gate
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest gate -kernels "$(KERNELS)" -vms $(VMS) -timeout 20m -testflags "$(VMTEST_FLAGS)" -host-packages "$(GATE_PKGS)" -out out/gate $(GATE_FLAGS) $(GATE_PKGS)

gate-update: ## rewrite fixtures/gate/baseline.json from this clean tree (same KERNELS as the gate)
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest gate -update -kernels "$(KERNELS)" -vms $(VMS) -timeout 20m -testflags "$(VMTEST_FLAGS)" -host-packages "$(GATE_PKGS)" $(GATE_FLAGS) $(GATE_PKGS)

gate-update-from: ## rewrite the baseline from REPORT (default out/gate/gate.json): the figures of a gate run (CI's) of this same clean revision, no new run
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest gate -update -from $(or $(REPORT),out/gate/gate.json)

gate-teeth: ## slow (~2 min a seed): every bug of vmtest/gate/seeds.go, seeded into a copy, must fail the gate (root, clang)
	@ci/deps.sh
	$(GO) test -tags teeth -count=1 -timeout 120m -v -run 'TestTeeth/$(SEED)' ./vmtest/gate

gate-speed-clean: ## slow (~1 min a run): the shield and the balancer timed against themselves as the gate times a change, 20 runs; every path within the limit in each (root; GATE_SPEED_ONLY=xdplb/ for the balancer alone)
	$(GO) test -tags teeth -count=1 -timeout 60m -v -run '^TestSpeedClean$$' ./vmtest/gate
