# floe — see README.md. `make demo` and `make test` are all a fresh machine needs.
GO       ?= go
BIN      := bin/floe
DEMO_ARGS ?= --records 500000

.PHONY: all build demo test bench interop-spark vet fmt clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/floe

# Runs the embedded default: in-process broker, generator, SQLite catalog and
# local warehouse under ./floe-demo; stops after DEMO_ARGS' record count.
demo: build
	./$(BIN) demo $(DEMO_ARGS)

# The whole suite: unit, MERGE, commit-protocol, torture and shutdown tests
# against an in-process Kafka-protocol broker, SQLite catalogs and real files,
# and interop tests against real services started from deploy/ (jars fetched
# from Maven Central once, cached under ~/.cache/floe).
test:
	bash deploy/setup-hdfs.sh
	bash deploy/setup-security.sh
	bash deploy/setup-python.sh >/dev/null
	$(GO) mod download
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...

# End-to-end throughput and memory beside the raw consume rate of the same
# broker, measured in the same run.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./cmd/floe/

# Spark reads a table `floe demo` wrote and runs the analyst queries. Not in
# `make test`: it downloads pyspark and the Iceberg Spark runtime once
# (~400 MB) into $FLOE_CACHE.
SPARK_RECORDS ?= 200000
interop-spark:
	bash deploy/spark/run.sh $(SPARK_RECORDS)

fmt:
	gofmt -w $$(git ls-files '*.go' ':!third_party')

clean:
	rm -rf bin floe-demo
