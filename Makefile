# paygate: `make run` serves on a local PostgreSQL, `make test` runs every test.
SHELL := /bin/bash
GO    ?= go

.PHONY: build run test test-short vet fmt db db-stop tools bench bench-growth reliability fuzz soak

build:
	$(GO) build -o bin/paygate ./cmd/paygate

run: build
	@scripts/run.sh

test:
	@scripts/test.sh

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# Ingest and end-to-end throughput, sent by wrk at 16, 64 and 256 connections,
# against the machine's limits measured in the same run (pgbench one and 32
# events per transaction, a floor server with no database), and scale-out to
# 2 and 4 instances (docs/performance.md). 6 to 13 minutes on 2 vCPUs.
bench:
	@scripts/bench.sh

# make bench's ingest and end-to-end rates with the database filled to each of
# GROWTH_LEVELS events (default 0,100000; the full run is
# GROWTH_LEVELS=0,1000000,10000000, about 45 minutes and 35 GB), and the time of
# /v1/ops/stats at each (docs/performance.md).
bench-growth:
	@scripts/bench-growth.sh

# The reliability and security suite: fuzzing, security checks against the
# real binary, SIGKILLs under load, several instances, database restarts;
# prints the total-queue table (docs/reliability.md). About eight minutes.
reliability:
	@scripts/reliability.sh

# The whole-system order property for SOAK_CHECKS cases (default 3000; make
# test runs rapid's default of 100): every case a random lifecycle with time
# passing, shuffled and duplicated, against Stripe's own totals.
soak:
	@scripts/soak.sh

# Every fuzz target for FUZZTIME (default 30s) each.
fuzz:
	@scripts/reliability.sh fuzz

# Prints the database URL `make run` uses (starting a private cluster if needed).
db:
	@scripts/db.sh

# Stops the private cluster under .pgdata/, if one was started.
db-stop:
	@scripts/db.sh --stop
