# xdpshield. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
KERNELS ?= 5.10 6.1 6.12 7.2

.PHONY: help demo test generate check-generate lint bench vmtest soak kernels-repin container-images container-test

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

demo: ## the main job: a storm against the shield in throwaway namespaces (root); JSON in out/storm.json
	@ci/deps.sh
	@mkdir -p out
	$(GO) run ./cmd/shield storm -json out/storm.json

test: ## every test but the container lane (root for the privileged ones); installs missing packages
	@ci/deps.sh
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/e2e/container$$')

container-images: ## the shield, edge and storm images FROM scratch (static binary) on the engine DOCKER_HOST names
	@mkdir -p out/container
	CGO_ENABLED=0 $(GO) build -trimpath -o out/container/shield ./cmd/shield
	cp e2e/container/Dockerfile out/container/Dockerfile
	for t in shield edge storm; do docker build -q --target $$t -t xdps-$$t:lane out/container || exit 1; done

# The container lane runs alone: go test ./... runs packages side by side,
# and the lane's budgets then measure cmd/shield's million-source tests.
container-test: ## the container lane (root): its own dockerd, the images, capabilities, the storm in containers
	@ci/deps.sh
	$(GO) test -count=1 -v -timeout 20m ./e2e/container

generate: ## rebuild the bpf2go output (Debian clang + libbpf-dev)
	@ci/deps.sh
	$(GO) generate ./bpf/...

check-generate: generate ## fail if the committed bpf2go output is stale
	@git diff --exit-code --stat -- bpf/ || { echo "generated files are stale: run make generate and commit" >&2; exit 1; }

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting" >&2; exit 1; }
	$(GO) vet ./...

bench: ## simulator benchmarks: ns/packet per path next to an XDP_DROP reference
	$(GO) test -run '^$$' -bench . -benchtime 2000000x ./sim

# The VM matrix (vmtest/): packages run in every kernel, and flags for each
# test binary (-test.short shortens the storms).
# (./e2e, not ./e2e/...: the container lane needs a Docker engine, which the
# VMs' initramfs has not.)
VMTEST_PKGS ?= ./sim/... ./e2e ./shield/... ./lb/... ./internal/...
VMTEST_FLAGS ?= -test.short -test.v -test.timeout=5m
VM_CPUS ?= 2
SOAK_RUNS ?= 5

vmtest: ## run the suites in qemu on each of $(KERNELS); matrix and JSON in out/vmtest
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest matrix -kernels "$(KERNELS)" -cpus $(VM_CPUS) -testflags "$(VMTEST_FLAGS)" -out out/vmtest $(VMTEST_PKGS)

soak: ## the short storm $(SOAK_RUNS) times per kernel of $(KERNELS) in qemu ($(VM_CPUS) vCPUs): pass counts per kernel
	@ci/deps.sh
	$(GO) build -o out/bin/vmtest ./vmtest/cmd/vmtest
	out/bin/vmtest matrix -kernels "$(KERNELS)" -cpus $(VM_CPUS) -runs $(SOAK_RUNS) -out out/soak \
		-testflags "-test.short -test.v -test.timeout=5m -test.run ^TestScenario" ./e2e/

kernels-repin: ## re-resolve fixtures/kernels.lock: each suite's current cloud-amd64 kernel
	$(GO) run ./vmtest/cmd/vmtest repin -kernels "$(KERNELS)"
