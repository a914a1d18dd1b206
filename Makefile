# airlock: egress gateway and executor for AI-agent sandboxes.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin/airlock
CORE_BIN  := bin/airlock-core
CNI_BIN   := bin/airlock-cni
INIT_BIN  := bin/airlock-init
IMAGE_DIR ?= bin/image
IMAGE_TAG ?= 0.1.0
STATICCHECK_VERSION ?= v0.8.2
TEST_TIMEOUT ?= 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the Debian packages tests and the demo need (only what is missing)
	@./scripts/deps.sh

.PHONY: build
build: ## Build bin/airlock (the front), bin/airlock-core and bin/airlock-init (written after it, beside it) and bin/airlock-cni with the version stamped
	CGO_ENABLED=0 $(GO) build -trimpath -tags airlock_front -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(CORE_BIN) ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(INIT_BIN) ./cmd/airlock-init
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(CNI_BIN) ./cmd/airlock-cni

.PHONY: image
image: build ## Write the container image as an OCI layout in bin/image, offline (no engine or registry; see Containerfile)
	$(GO) run ./test/cmd/mkimage -bin bin -layout $(IMAGE_DIR) -ref $(IMAGE_TAG)
	@echo "load it with one of:"
	@echo "  skopeo copy oci:$(IMAGE_DIR):$(IMAGE_TAG) docker-daemon:airlock:$(IMAGE_TAG)"
	@echo "  skopeo copy oci:$(IMAGE_DIR):$(IMAGE_TAG) containers-storage:localhost/airlock:$(IMAGE_TAG)   # podman, CRI-O"
	@echo "  tar -C $(IMAGE_DIR) -cf bin/airlock-image.tar . && ctr -n k8s.io images import --index-name airlock:$(IMAGE_TAG) bin/airlock-image.tar   # containerd"
	@echo "  skopeo copy oci:$(IMAGE_DIR):$(IMAGE_TAG) docker://registry.example/airlock:$(IMAGE_TAG)"

.PHONY: test
test: deps ## Run every test with -race (root tests run for real as root, skip otherwise; cmd/airlock also as the front), and test-python and test-unpriv as root; fail on any airlock resource the run left behind; the last line is the wall time, whole and per phase
	@before=$$(mktemp) && ./scripts/clean-stale.sh --list >"$$before" || exit 1; \
	start=$$(date +%s); t=$$start; times=""; \
	lap() { now=$$(date +%s); times="$$times$${times:+, }$$1 $$((now - t))s"; t=$$now; }; \
	rc=0; $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./... || rc=$$?; lap "go test ./..."; \
	if [ "$$rc" = 0 ]; then $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags airlock_front ./cmd/airlock/ || rc=$$?; lap "front cmd/airlock"; fi; \
	if [ "$$rc" = 0 ] && [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory test-python || rc=$$?; lap test-python; elif [ "$$rc" = 0 ]; then echo "test: test-python skipped (it needs root to run airlock serve)"; fi; \
	if [ "$$rc" = 0 ] && [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory test-unpriv || rc=$$?; lap test-unpriv; elif [ "$$rc" = 0 ]; then echo "test: test-unpriv skipped (it needs root to create its unprivileged user)"; fi; \
	./scripts/clean-stale.sh --check "$$before" || rc=1; rm -f "$$before"; lap "leftover check"; \
	result=passed; [ "$$rc" = 0 ] || result="FAILED (exit $$rc)"; \
	echo "test: $$result; wall time $$((t - start))s: $$times"; exit $$rc

.PHONY: test-python
test-python: deps build ## Run the Python client's tests (clients/python) against a real daemon, bin/airlock serve (root)
	cd clients/python && AIRLOCK_BIN=$(CURDIR)/$(BIN) /usr/bin/python3 -m pytest -q -p no:cacheprovider tests

.PHONY: test-unpriv
test-unpriv: ## As root: run the gateway's attack tests as the unprivileged user alk-ci (created when missing; AIRLOCK_CI_USER names another)
	GO=$(GO) ./scripts/unpriv-tests.sh

.PHONY: test-root
test-root: deps ## Run only the root tests, failing instead of skipping when not root
	AIRLOCK_REQUIRE_ROOT_TESTS=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run Root ./...

.PHONY: e2e
e2e: deps build ## Run the end-to-end tests in test/ (root)
	AIRLOCK_BIN=$(CURDIR)/$(BIN) $(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./test/...

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, go mod tidy -diff and the package-layout check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags airlock_front ./cmd/airlock/
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags airlock_front ./cmd/airlock/
	$(GO) mod tidy -diff
	$(GO) test -count=1 ./test/layout/

.PHONY: bench
bench: deps ## Run the benchmarks (ratios against direct connections in the same run)
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout $(TEST_TIMEOUT) ./...

.PHONY: bench-compare
bench-compare: ## airlock vs direct, squid, dnsmasq, unbound, bubblewrap, unshare (root) into docs/BENCHMARKS.md; BENCH_QUICK=1: a smoke run under bin/; BENCH_BEFORE=<git rev>: that revision built too, a "before" column, alternated
	@./scripts/bench-compare.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 20s)
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$pkg || exit 1; \
		done; \
	done

.PHONY: demo
demo: deps build ## Offline demo (root): a sandboxed agent against a fake internet, then the audit log
	AIRLOCK_BIN=$(CURDIR)/$(BIN) ./scripts/demo.sh
