# xdpshield. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
KERNELS ?= 5.10 6.1 6.12 7.2

.PHONY: help demo test generate check-generate lint bench study study-quick vmtest soak kernels-repin

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

demo: ## the main job: a storm against the shield in throwaway namespaces (root); JSON in out/storm.json
	@ci/deps.sh
	@mkdir -p out
	$(GO) run ./cmd/shield storm -json out/storm.json

test: ## every test (root for the privileged ones); installs missing packages
	@ci/deps.sh
	$(GO) test -count=1 -timeout 30m ./...

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

study: ## the cost study, as root (about 11 min here): out/study, and docs/study.md with its plots
	@ci/deps.sh
	$(GO) build -o out/bin/shield ./cmd/shield
	out/bin/shield study -out out/study -docs docs

study-quick: ## the study in short (CI, about 2 min): fails if a configuration produced no numbers
	@ci/deps.sh
	$(GO) build -o out/bin/shield ./cmd/shield
	out/bin/shield study -quick -out out/study-quick

# The VM matrix (vmtest/): packages run in every kernel, and flags for each
# test binary (-test.short shortens the storms).
VMTEST_PKGS ?= ./sim/... ./e2e/... ./shield/... ./internal/... ./probe/...
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
