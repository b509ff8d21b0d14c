# ckf-stream: build, run and test targets. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
PKGS      ?= ./...
# The whole suite (unit + integration on the real broker) must stay well under 15 minutes.
TEST_FLAGS ?= -race -count=1 -timeout 20m
BENCH_FLAGS ?= -run '^$$' -bench . -benchmem -count 5 -timeout 60m
FUZZTIME  ?= 10s
KAFKA_DIR := testenv/kafka
BENCH_OUT ?= bench.txt

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the processor binary into bin/
	$(GO) build -o bin/processor ./cmd/processor

.PHONY: run
run: ## run the main job (embedded in-process broker unless KAFKA_BROKERS is set)
	$(GO) run ./cmd/processor demo

.PHONY: test
test: ## unit + integration tests against a real Kafka broker (started and stopped if none is running)
	bash $(KAFKA_DIR)/with-kafka.sh $(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: test-unit
test-unit: ## tests that need no broker (packages without integration tests)
	$(GO) test $(TEST_FLAGS) ./ckf/... ./schemas/...

.PHONY: bench
bench: ## Go benchmarks with baselines in the same run; writes $(BENCH_OUT) for benchstat
	$(GO) test $(BENCH_FLAGS) ./ckf/... ./schemas/... | tee $(BENCH_OUT)

.PHONY: fuzz
fuzz: ## a short run ($(FUZZTIME)) of every fuzz target
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

.PHONY: lint
lint: ## gofmt check, go vet, staticcheck (installed on first use)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@sc=$$(command -v staticcheck || echo "$$($(GO) env GOPATH)/bin/staticcheck"); \
	  if [[ ! -x "$$sc" ]]; then \
	    echo "installing staticcheck"; $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2 || sc=""; \
	  fi; \
	  if [[ -n "$$sc" && -x "$$sc" ]]; then "$$sc" $(PKGS); else echo "staticcheck unavailable; skipped"; fi

.PHONY: kafka-up
kafka-up: ## start the real single-node Kafka broker (prints its address)
	@bash $(KAFKA_DIR)/kafka-up.sh

.PHONY: kafka-down
kafka-down: ## stop the broker started by kafka-up
	@bash $(KAFKA_DIR)/kafka-down.sh

.PHONY: clean
clean: ## remove build outputs (keeps the cached Kafka jars)
	rm -rf bin $(BENCH_OUT)
