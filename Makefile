# ckf-stream: build, run and test targets. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
PKGS      ?= ./...
# The whole suite (unit + integration on the real broker) must stay well under 15 minutes.
# -p 4: the test binaries mostly wait on the broker (a whole run used about 6.5 CPU-minutes in
# 12 wall-minutes on 2 cores), so four packages at once start streams, the longest package, sooner:
# 10m45s against 12m13s for the default -p 2, one run each on this shared 2-vCPU machine.
TEST_FLAGS ?= -race -count=1 -timeout 20m -p 4
BENCH_FLAGS ?= -run '^$$' -bench . -benchmem -count 5 -timeout 60m
FUZZTIME  ?= 10s
KAFKA_DIR := testenv/kafka
REGISTRY_DIR := testenv/registry
BENCH_OUT ?= bench.txt
BENCH_E2E_OUT ?= bench-e2e.txt
# The end-to-end benchmarks (streams/lanes/bench_e2e_lanes_test.go, streams/query/bench_e2e_query_test.go,
# streams/relay/bench_e2e_relay_test.go); each one runs its own repetitions, one package at a time.
BENCH_E2E ?= E2E
PERF_DIR  ?= docs/perf
# make soak: the deployment as processes (SOAK_DCS relays, two indexer replicas) with three faults
# inside, for SOAK_DURATION at SOAK_EVENT_RATE KV events/s and SOAK_QUERY_RATE queries/s over Kafka.
# make soak-demo: the one-process demo's 16 lanes at the measured capacity (docs/RELIABILITY.md).
SOAK_DURATION ?= 30m
SOAK_DCS ?= 4
SOAK_EVENT_RATE ?= 2000
SOAK_QUERY_RATE ?= 100
SOAK_DEMO_DURATION ?= 10m
SOAK_DEMO_EVENT_RATE ?= 8000
SOAK_DEMO_QUERY_RATE ?= 200
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da
STATICCHECK_VERSION ?= v0.8.2
# tools/ (benchreport, peerreport, plots, soak) is a module of its own, tools/go.mod, so that the service
# module does not depend on gonum. $(call tool,NAME) builds tools/NAME into bin/ and names the
# binary, which then runs from the repository root (relative paths keep their meaning).
TOOLS_BIN := $(abspath bin)
tool = $(GO) -C tools build -o $(TOOLS_BIN)/$(1) ./$(1) && $(TOOLS_BIN)/$(1)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The version processor --version prints (main.version): the closest tag, the commit and
# whether the tree is modified.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
GO_LDFLAGS := -X main.version=$(VERSION)

.PHONY: build
build: ## build the processor binary into bin/
	$(GO) build -ldflags '$(GO_LDFLAGS)' -o bin/processor ./cmd/processor

.PHONY: run
run: ## run the main job (embedded in-process broker unless KAFKA_BROKERS is set)
	@echo "make run: building bin/processor (a first build compiles every dependency: a minute or two)..."
	@$(GO) build -ldflags '$(GO_LDFLAGS)' -o bin/processor ./cmd/processor
	bin/processor demo

# The container image (Dockerfile), built with docker, else podman (CONTAINER_ENGINE chooses):
# IMAGE:IMAGE_TAG, the chart's image.repository and the version processor --version prints.
# make image-push REGISTRY=ghcr.io/acme tags it REGISTRY/IMAGE:IMAGE_TAG, pushes it and prints the
# Helm values that run it. deploy/image_make_test.go runs both against stand-in engines.
IMAGE ?= ckf-stream/processor
IMAGE_TAG ?= $(VERSION)
CONTAINER_ENGINE ?= $(firstword $(foreach e,docker podman,$(shell command -v $(e) 2>/dev/null)))

.PHONY: image
image: ## build the container image IMAGE:IMAGE_TAG (ckf-stream/processor:<version>) with docker or podman
	@if [ -z "$(CONTAINER_ENGINE)" ]; then echo "make image: neither docker nor podman is on PATH: install one (or set CONTAINER_ENGINE to a docker-compatible command); the image is built from the Dockerfile" >&2; exit 2; fi
	@if ! $(CONTAINER_ENGINE) info >/dev/null 2>&1; then echo "make image: $(CONTAINER_ENGINE) is installed but no engine answers ('$(CONTAINER_ENGINE) info' fails): start the daemon, or set CONTAINER_ENGINE=podman" >&2; exit 2; fi
	$(CONTAINER_ENGINE) build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(IMAGE_TAG) .

.PHONY: image-push
image-push: ## build the image and push it to REGISTRY (make image-push REGISTRY=ghcr.io/acme), then print the Helm values that run it
	@if [ -z "$(REGISTRY)" ]; then echo "make image-push: set REGISTRY, the registry and path to push to: make image-push REGISTRY=ghcr.io/acme pushes ghcr.io/acme/$(IMAGE):$(IMAGE_TAG)" >&2; exit 2; fi
	@$(MAKE) --no-print-directory image
	@case "$(IMAGE_TAG)" in *-dirty) echo "make image-push: warning: the tree has uncommitted changes; the tag $(IMAGE_TAG) says so, but names no commit that holds them" >&2;; esac
	$(CONTAINER_ENGINE) tag $(IMAGE):$(IMAGE_TAG) $(REGISTRY)/$(IMAGE):$(IMAGE_TAG)
	$(CONTAINER_ENGINE) push $(REGISTRY)/$(IMAGE):$(IMAGE_TAG)
	@echo "pushed $(REGISTRY)/$(IMAGE):$(IMAGE_TAG); install the chart with --set image.repository=$(REGISTRY)/$(IMAGE) --set image.tag=$(IMAGE_TAG)"

# Helm, for the chart's lint and render test (deploy/helm_test.go): built once from the Go module
# proxy (pinned HELM_VERSION) into bin/, like promtool.
HELM_VERSION ?= v4.3.2
HELM := bin/helm-$(HELM_VERSION)/helm

$(HELM):
	GOBIN=$(abspath $(@D)) $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

.PHONY: helm
helm: $(HELM) ## build Helm into bin/ (the chart test, deploy/helm_test.go, lints and renders deploy/helm/ckf-stream with it)

.PHONY: test
test: test-alerts $(HELM) peer-dynamo ## unit + integration tests against a real Kafka broker and Apicurio Registry (each started and stopped if none is running), the alert rules and the Helm chart, the lane page in headless Chromium (CKF_REQUIRE_BROWSER=1: a missing chromium fails it); then ckf/ again without the race detector
	HELM=$(abspath $(HELM)) CKF_REQUIRE_BROWSER=1 CKF_REQUIRE_BROKER=1 bash $(REGISTRY_DIR)/with-registry.sh bash $(KAFKA_DIR)/with-kafka.sh $(GO) test $(TEST_FLAGS) $(PKGS)
	$(MAKE) --no-print-directory test-norace

# Race builds replace the amd64 assembly of the transposed table (ckf/index: table_store*_amd64.s,
# the stores, plain MOVs the race detector cannot see; probe_avx2_amd64.s, the AVX2 probe of wide
# rows) with sync/atomic Go, so the race run above never executes what production binaries run;
# this pass does (ckf/ needs no broker).
.PHONY: test-norace
test-norace: ## ckf/ without the race detector: the amd64 assembly paths that race builds leave out
	$(GO) test -count=1 -timeout 10m ./ckf/...

# promtool, built once from the Prometheus module at a pinned version into bin/ (its own folder per
# version, so a version bump rebuilds). remove_all_sd leaves out the service-discovery plugins,
# which promtool's rule commands do not use: a third of the build.
PROMTOOL_VERSION ?= v0.316.0
PROMTOOL := bin/promtool-$(PROMTOOL_VERSION)/promtool

$(PROMTOOL):
	GOBIN=$(abspath $(@D)) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

.PHONY: test-alerts
test-alerts: $(PROMTOOL) ## promtool check and unit-test deploy/prometheus/alerts.yml (alerts_test.yml: one test per alert)
	$(PROMTOOL) check rules deploy/prometheus/alerts.yml
	cd deploy/prometheus && $(abspath $(PROMTOOL)) test rules alerts_test.yml

.PHONY: test-faults
test-faults: ## the multi-process fault suite (kill -9, broker restart, hostile input); FAULTS_ITERATIONS, FAULTS_SEED, FAULTS_FLAGS=-long
	bash $(KAFKA_DIR)/with-kafka.sh $(GO) test -count=1 -timeout 30m -v ./faults/ $(FAULTS_FLAGS)

.PHONY: bench-bridge
bench-bridge: ## processor bridge's event rate and gap-fill figures against the engine emulators on the real broker (testenv/engine; not part of test)
	bash $(KAFKA_DIR)/with-kafka.sh $(GO) test -count=1 -timeout 20m -v -run '^$$' -bench '^(BenchmarkBridgeThroughput|BenchmarkBridgeFleet64)$$' -benchtime 1x ./testenv/engine/

.PHONY: soak
soak: ## relays and two indexer replicas as processes under load for SOAK_DURATION (30m) with a relay kill -9, an indexer kill -9 and a broker restart inside: exact answers after each, no error, RSS flat; samples in $(PERF_DIR)/soak-faults.csv (not part of test)
	@mkdir -p $(PERF_DIR)
	bash $(KAFKA_DIR)/with-kafka.sh env CKF_SOAK_DURATION=$(SOAK_DURATION) CKF_SOAK_DCS=$(SOAK_DCS) \
	  CKF_SOAK_EVENT_RATE=$(SOAK_EVENT_RATE) CKF_SOAK_QUERY_RATE=$(SOAK_QUERY_RATE) CKF_SOAK_CSV=$(abspath $(PERF_DIR))/soak-faults.csv \
	  $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./faults/

.PHONY: soak-demo
soak-demo: build ## 16 lanes in one process (processor demo) under load for SOAK_DEMO_DURATION (10m) with queries; RSS and lane state in $(PERF_DIR)/soak.csv (not part of test)
	@mkdir -p $(PERF_DIR)
	$(GO) -C tools build -o $(TOOLS_BIN)/soak ./soak
	bash $(KAFKA_DIR)/with-kafka.sh $(TOOLS_BIN)/soak -processor bin/processor -duration $(SOAK_DEMO_DURATION) \
	  -event-rate $(SOAK_DEMO_EVENT_RATE) -query-rate $(SOAK_DEMO_QUERY_RATE) -out $(PERF_DIR)/soak.csv -log $(PERF_DIR)/soak-demo.log

# make eval: the conversation trace through the whole system (docs/EVALUATION.md). Four runs of
# EVAL_WINDOW of trace time: live at 1× real time, live at EVAL_SPEEDUP× real time, with arrivals
# compressed EVAL_COMPRESS× (a busier fleet) at EVAL_SPEEDUP×, and with the KV events through
# processor bridge's path (--via-bridge) at EVAL_SPEEDUP×; report.json and the PNG plots of each
# in EVAL_OUT/<run>. About 13 minutes on 2 vCPUs.
EVAL_TRACE    ?= traces/conversation_trace.jsonl
EVAL_OUT      ?= eval-out
EVAL_WINDOW   ?= 10m
EVAL_SPEEDUP  ?= 20
EVAL_COMPRESS ?= 3
EVAL_FLAGS    ?=

.PHONY: eval
eval: build ## replay the conversation trace through the pipeline under every routing policy; reports and plots in EVAL_OUT (not part of test)
	$(GO) -C tools build -o $(TOOLS_BIN)/evalplots ./evalplots
	bash $(KAFKA_DIR)/with-kafka.sh bin/processor replay --trace $(EVAL_TRACE) --window $(EVAL_WINDOW) --speedup 1 --out $(EVAL_OUT)/1x $(EVAL_FLAGS)
	$(TOOLS_BIN)/evalplots -dir $(EVAL_OUT)/1x
	bash $(KAFKA_DIR)/with-kafka.sh bin/processor replay --trace $(EVAL_TRACE) --window $(EVAL_WINDOW) --speedup $(EVAL_SPEEDUP) --out $(EVAL_OUT)/speedup $(EVAL_FLAGS)
	$(TOOLS_BIN)/evalplots -dir $(EVAL_OUT)/speedup
	bash $(KAFKA_DIR)/with-kafka.sh bin/processor replay --trace $(EVAL_TRACE) --window $(EVAL_WINDOW) --speedup $(EVAL_SPEEDUP) --compress $(EVAL_COMPRESS) --out $(EVAL_OUT)/compress $(EVAL_FLAGS)
	$(TOOLS_BIN)/evalplots -dir $(EVAL_OUT)/compress
	bash $(KAFKA_DIR)/with-kafka.sh bin/processor replay --trace $(EVAL_TRACE) --window $(EVAL_WINDOW) --speedup $(EVAL_SPEEDUP) --via-bridge --delays "" --out $(EVAL_OUT)/bridge $(EVAL_FLAGS)
	$(TOOLS_BIN)/evalplots -dir $(EVAL_OUT)/bridge

.PHONY: test-unit
test-unit: ## every in-process test of every package, with no broker, registry or network: the tests that need one skip with one line (make test runs them all)
	env -u KAFKA_BROKERS -u TEST_SCHEMA_REGISTRY_URL -u CKF_REQUIRE_BROKER -u CKF_REQUIRE_BROWSER -u HELM \
		CKF_IN_PROCESS_ONLY=1 KAFKA_RUN_DIR=$(CURDIR)/bin/no-broker REGISTRY_RUN_DIR=$(CURDIR)/bin/no-registry $(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: bench
bench: ## Go benchmarks with baselines in the same run; writes $(BENCH_OUT) for benchstat and a ratio report
	@mkdir -p $(PERF_DIR)
	@{ echo "nproc: $$(nproc)"; echo "loadavg-start: $$(cut -d' ' -f1-3 /proc/loadavg)"; } > $(BENCH_OUT)
	$(GO) test $(BENCH_FLAGS) ./ckf/... ./schemas/... | tee -a $(BENCH_OUT)
	@echo "loadavg-end: $$(cut -d' ' -f1-3 /proc/loadavg)" >> $(BENCH_OUT)
	$(call tool,benchreport) -o $(PERF_DIR)/bench-report.md -csv $(PERF_DIR) $(BENCH_OUT)

.PHONY: benchstat
benchstat: ## summarise $(BENCH_OUT) with golang.org/x/perf's benchstat (fetched by go run)
	$(GO) run golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION) $(BENCH_OUT)

.PHONY: bench-e2e
bench-e2e: ## end-to-end benchmarks on the real broker (ingest vs raw, lag, queries, restore, relay); results in $(PERF_DIR)
	@mkdir -p $(PERF_DIR)
	@{ echo "nproc: $$(nproc)"; echo "loadavg-start: $$(cut -d' ' -f1-3 /proc/loadavg)"; } > $(BENCH_E2E_OUT)
	CKF_PERF_DIR=$(abspath $(PERF_DIR)) bash $(KAFKA_DIR)/with-kafka.sh \
	  $(GO) test -run '^$$' -bench '$(BENCH_E2E)' -benchtime 1x -count 1 -timeout 90m -p 1 ./streams/lanes/ ./streams/query/ ./streams/relay/ | tee -a $(BENCH_E2E_OUT)
	@echo "loadavg-end: $$(cut -d' ' -f1-3 /proc/loadavg)" >> $(BENCH_E2E_OUT)
	$(call tool,benchreport) -o $(PERF_DIR)/bench-e2e-report.md $(BENCH_E2E_OUT)

# make bench-peer: alternating rounds of the Rust program on the published dynamo-kv-router crate
# (bench/peer-dynamo) and of the Go peer benchmarks (bench/peer), run by bench/peer-rounds.sh;
# raw outputs in PEER_DIR. The report takes every directory of PEER_DIRS (one per machine: the
# rounds of another machine come from make bench-peer-bundle, run there). The worker-stage rows
# (workers-apply fills 1 M and 10 M memberships per tree, workers-match128) add about 1-1.5 minutes
# per round per side on 2 vCPUs.
PEER_ROUNDS ?= 5
PEER_BENCH_MS ?= 1000
PEER_DIR  ?= $(PERF_DIR)/peer
# Every docs/perf/peer-<machine>/ directory is another machine's rounds (kept from an earlier run or
# brought back from make bench-peer-bundle), a column of its own in the report.
PEER_DIRS ?= $(PEER_DIR) $(filter-out $(PEER_DIR),$(patsubst %/,%,$(sort $(wildcard $(PERF_DIR)/peer-*/))))
PEER_RUST := bench/peer-dynamo/target/release/peer-dynamo
PEER_BUNDLE ?= bin/peer-bundle

# The crate's side of bench/peer's TestDifferentialAgainstCrate, built before make test runs the
# packages: built inside the test, the crate's first build (minutes on a fresh clone of a loaded
# 2-vCPU machine) counted against the package's test timeout and once ran past it. Later builds
# only check that nothing changed. Without cargo the test skips (and says so).
.PHONY: peer-dynamo
peer-dynamo: ## build bench/peer-dynamo, the Rust program on the dynamo-kv-router crate (skipped without cargo)
	@if command -v cargo >/dev/null 2>&1; then cargo build --release --locked --manifest-path bench/peer-dynamo/Cargo.toml; \
	else echo "peer-dynamo: cargo is not in PATH; bench/peer's TestDifferentialAgainstCrate will skip"; fi

.PHONY: peer-programs
peer-programs: peer-dynamo
	@mkdir -p bin
	$(GO) test -c -o bin/peer.test ./bench/peer/
	@{ echo "go: $$($(GO) env GOVERSION)"; \
	  echo "rustc: $$(rustc --version)"; \
	  echo "crate: dynamo-kv-router $$(grep -A1 '^name = "dynamo-kv-router"' bench/peer-dynamo/Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"; \
	  echo "commit: $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD -- . ':!docs/perf' 2>/dev/null || echo ' (with local changes outside docs/perf)')"; } > bin/peer-versions.txt

.PHONY: bench-peer
bench-peer: peer-programs ## our Go code against the real dynamo-kv-router crate, PEER_ROUNDS (5) alternating rounds; writes $(PERF_DIR)/peer-report.md from every machine's rounds in PEER_DIRS (the first run fetches and builds the crate: minutes; not part of test)
	$(GO) test -count=1 -run '^TestPeerFixtures$$' ./bench/peer/
	PEER_RUST=$(PEER_RUST) PEER_GO=bin/peer.test PEER_VERSIONS=bin/peer-versions.txt \
	  bash bench/peer-rounds.sh $(PEER_DIR) $(PEER_ROUNDS) $(PEER_BENCH_MS)
	$(MAKE) --no-print-directory bench-peer-report

.PHONY: bench-peer-report
bench-peer-report: ## rewrite $(PERF_DIR)/peer-report.md from the rounds already in PEER_DIRS (one directory per machine)
	$(call tool,peerreport) $(foreach d,$(PEER_DIRS),-dir $(d)) -o $(PERF_DIR)/peer-report.md

.PHONY: bench-peer-bundle
bench-peer-bundle: peer-programs ## the bench-peer programs and bench/peer-rounds.sh in $(PEER_BUNDLE), for a machine without a toolchain: run "$(PEER_BUNDLE)/peer-rounds.sh OUT ROUNDS MS LABEL" there, copy OUT to $(PERF_DIR)/peer-<machine> (peer-manycore, say), then make bench-peer-report
	@rm -rf $(PEER_BUNDLE) && mkdir -p $(PEER_BUNDLE)
	cp $(PEER_RUST) bin/peer.test bench/peer-rounds.sh $(PEER_BUNDLE)/
	cp bin/peer-versions.txt $(PEER_BUNDLE)/versions.txt
	@du -sh $(PEER_BUNDLE)

.PHONY: plots
plots: ## PNG plots in $(PERF_DIR) from the results of bench and bench-e2e
	$(call tool,plots) -dir $(PERF_DIR)

.PHONY: fuzz
fuzz: ## a short run ($(FUZZTIME)) of every fuzz target
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

.PHONY: generate
generate: ## regenerate the generated Go files (stringer String methods of the enums; versions pinned in the go:generate lines)
	$(GO) generate $(PKGS)

.PHONY: lint
lint: ## generated files up to date, gofmt, go mod tidy (no diff), go vet and staticcheck of the service and tools/ modules (staticcheck installed on first use)
	@snap() { for f in $$(git ls-files -co --exclude-standard -- '*.go' 2>/dev/null || find . -name '*.go'); do \
	    if [[ -f "$$f" ]]; then sha256sum "$$f"; fi; \
	  done; }; \
	  before=$$(snap); $(GO) generate $(PKGS); after=$$(snap); \
	  if [[ "$$before" != "$$after" ]]; then \
	    echo "go generate changed these files; run make generate and commit the result:"; \
	    diff <(echo "$$before") <(echo "$$after") | sed -n 's/^[<>] [0-9a-f]*  /  /p' | sort -u; exit 1; \
	  fi
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) -C tools mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) -C tools vet ./...
	@sc=$$(command -v staticcheck || true); \
	  if [[ -z "$$sc" ]]; then \
	    bin=$$($(GO) env GOBIN); [[ -n "$$bin" ]] || bin="$$($(GO) env GOPATH | cut -d: -f1)/bin"; \
	    sc="$$bin/staticcheck"; \
	    if [[ ! -x "$$sc" ]]; then \
	      echo "installing staticcheck $(STATICCHECK_VERSION) into $$bin"; \
	      $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	    fi; \
	  fi; \
	  echo "$$sc $(PKGS)"; "$$sc" $(PKGS); \
	  echo "(cd tools && $$sc ./...)"; cd tools && "$$sc" ./...

# -p 1: one package at a time, so that only one three-node cluster runs on the two cores.
.PHONY: test-cluster
test-cluster: ## the full set of three-node cluster scenarios (leader kill and shutdown, ISR, SIGSTOP, network faults on each route, the leader cut off from its followers, two of three nodes lost, query rebalance; each test starts its own cluster); FAULTS_SEED
	CKF_CLUSTER_FULL=1 $(GO) test -p 1 -race -count=1 -timeout 60m -v -run 'Cluster' ./testenv/ ./faults/

.PHONY: cluster-up
cluster-up: ## start a three-node Kafka cluster on 127.0.0.1:19092-19094 (data in $TMPDIR/ckf-cluster, default /tmp; prints the bootstrap list)
	@bash $(KAFKA_DIR)/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## stop the cluster started by cluster-up
	@bash $(KAFKA_DIR)/cluster-down.sh

# Two regions (issue 38): two single-node clusters and MirrorMaker 2 between them (design §8).
.PHONY: regions-up
regions-up: ## start regions a (127.0.0.1:29092) and b (127.0.0.1:29192), each a single-node Kafka cluster, and MirrorMaker 2 mirroring the lanes and the snapshot index both ways (data in $TMPDIR/ckf-regions; MIRROR_POLICY=identity for same-named topics, a->b only)
	@bash $(KAFKA_DIR)/regions-up.sh

.PHONY: regions-down
regions-down: ## stop MirrorMaker and the two regions started by regions-up
	@bash $(KAFKA_DIR)/regions-down.sh

# -p 1: one package, one topology (two brokers and MirrorMaker) at a time on the two cores.
.PHONY: test-regions
test-regions: ## the region tests: mirroring in order, offsets that differ, a WAN cut and heal, MirrorMaker kill -9, mirror latency; then the product on two regions (a relay and an indexer in each: answers alike, remote lanes stale through a cut, the identity policy, remote event-to-visible; docs/regions.md). Each test starts its own regions and MirrorMaker; a topology that cannot start fails
	CKF_REQUIRE_REGIONS=1 $(GO) test -p 1 -count=1 -timeout 30m -v -run '^TestRegions' ./testenv/

.PHONY: kafka-up
kafka-up: ## start the real single-node Kafka broker (prints its address)
	@bash $(KAFKA_DIR)/kafka-up.sh

.PHONY: kafka-down
kafka-down: ## stop the broker started by kafka-up
	@bash $(KAFKA_DIR)/kafka-down.sh

.PHONY: registry-up
registry-up: ## start Apicurio Registry, in-memory, on 127.0.0.1:8181 (prints its Confluent API URL)
	@bash $(REGISTRY_DIR)/registry-up.sh

.PHONY: registry-down
registry-down: ## stop the registry started by registry-up
	@bash $(REGISTRY_DIR)/registry-down.sh

.PHONY: clean
clean: ## remove build outputs, tool binaries included (keeps the cached Kafka jars and registry)
	rm -rf bin $(BENCH_OUT) $(BENCH_E2E_OUT)
