# wowd: see README.md. `make help` lists the targets.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -s -w -X github.com/wowd/wowd/cli.Version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
CONFIG ?= configs/wowd.yaml
BENCH_COUNT ?= 5
HELM_VERSION ?= v3.22.0

SEEDS ?= 200
SOAK ?= 10m

.PHONY: help build run dev test test-unit sim soak bench bench-e2e docs docker tools clean bench-http bench-kafka bench-latency fuzz

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## static binary in bin/wowd
	CGO_ENABLED=0 go build $(GOFLAGS_BUILD) -o bin/wowd ./cmd/wowd

run: build ## run the daemon with CONFIG (default configs/wowd.yaml)
	bin/wowd run --config $(CONFIG)

dev: ## wowd on an embedded broker with demo traffic
	go run ./cmd/wowd dev --demo

test: ## the whole suite: gofmt, vet, unit and kfake tests with -race, the real-Kafka suite
	@scripts/test-all

test-unit: ## everything but the real-Kafka suite
	go vet ./...
	go test -race -shuffle=on -tags synctests -timeout 60m $$(go list -tags synctests ./... | grep -v '/test/realkafka$$')

sim: ## the seeded fault simulation, all with commit stalls: the CI seeds, then SEEDS more (default 200)
	go test -count=1 -tags synctests -timeout 60m ./test/sim -run TestSim -stalls -seeds $(SEEDS)

soak: ## three wowd processes against a real broker under faults for SOAK (default 10m)
	WOWD_SOAK=$(SOAK) go test -count=1 -timeout 90m ./test/realkafka -run TestSoak -v

bench: ## executor benchmarks with their baselines in one run; ratios as in docs/benchmarks.md
	go test -c -o bin/executor.test ./internal/executor
	for i in $$(seq $(BENCH_COUNT)); do \
	  bin/executor.test -test.run '^$$' -test.bench 'Dispatch' -test.benchtime 1000000x; \
	  bin/executor.test -test.run '^$$' -test.bench 'HeadOfLine' -test.benchtime 40000x; \
	  bin/executor.test -test.run '^$$' -test.bench 'SlowHandlers' -test.benchtime 100000x; \
	done | tee bench.txt
	go run ./internal/executor/benchratio < bench.txt

bench-e2e: ## the receiver end to end against a plain franz-go consumer, in one process with the fake broker
	go test -c -o bin/receiver.test ./internal/receiver
	for i in $$(seq $(BENCH_COUNT)); do \
	  bin/receiver.test -test.run '^$$' -test.bench 'Consume' -test.benchtime 3x; \
	done | tee bench-e2e.txt
	go run ./internal/executor/benchratio < bench-e2e.txt

FUZZTIME ?= 60s

fuzz: ## every fuzz target for FUZZTIME each (default 60s); failing inputs land in testdata/fuzz
	scripts/fuzz $(FUZZTIME)

docs: ## regenerate docs/configuration.md and docs/metrics.md from the code
	go run ./internal/docgen -out docs

docker: ## container image wowd:$(VERSION) (needs a Docker engine)
	docker build -t wowd:$(VERSION) --build-arg VERSION=$(VERSION) .

tools: ## helm for test/deploy, built from the Go module proxy into .cache/bin
	GOBIN=$(CURDIR)/.cache/bin CGO_ENABLED=0 go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

clean:
	rm -rf bin bench.txt

bench-http: ## the http sink against a sequential per-partition pusher, a 5 ms server in the same process
	go test -c -o bin/handlers.test ./internal/handlers
	for i in $$(seq $(BENCH_COUNT)); do \
	  bin/handlers.test -test.run '^$$' -test.bench 'HTTPSink' -test.benchtime 10000x; \
	done | tee bench-http.txt
	go run ./internal/executor/benchratio < bench-http.txt

BENCH_KAFKA_COUNT ?= 3
BENCH_KAFKA_ARGS ?=

bench-kafka: build ## wowd (format raw, wow) against a plain franz-go consumer, as processes on a real broker
	go build -o bin/benchkafka ./test/benchkafka
	bin/benchkafka throughput -wowd bin/wowd -rounds $(BENCH_KAFKA_COUNT) $(BENCH_KAFKA_ARGS)

bench-latency: build ## broker-to-HTTP-sink p50/p99 at 1,000 msg/s, wowd against plain franz-go, real broker
	go build -o bin/benchkafka ./test/benchkafka
	bin/benchkafka latency -wowd bin/wowd -rounds $(BENCH_KAFKA_COUNT) $(BENCH_KAFKA_ARGS)
