# The two set-up commands of the README: `make demo` and `make test`.
SQLC := go tool -modfile=tools/go.mod sqlc
GO_TEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: all build generate check-generated lint test test-matrix demo

all: lint test

build:
	go build -o bin/ ./cmd/...

# Regenerate db/ from sql/ (sqlc v1.31.1, pinned in tools/go.mod).
generate:
	$(SQLC) generate

# Fails when db/ is not what sqlc generates from sql/ today.
check-generated:
	$(SQLC) diff

lint: check-generated
	@if git grep -nE '^(<<<<<<<|>>>>>>>) ' -- ':!Makefile'; then echo "merge conflict markers left in the files above"; exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go vet -tags faults ./internal/testkit/faults/  # the fault gates: ./... leaves out their build tag
	cd bench/river && go vet .
	go run ./cmd/qlmigrate hash --check
	go test -count=1 ./internal/testkit/archrules  # the package rules of docs/architecture.md

# Every package test, against real PostgreSQL servers the tests start themselves.
test:
	go test $(GO_TEST_FLAGS) ./...

# The whole suite once per PostgreSQL major (server binaries from scripts/pg-bin.sh, cached
# outside the repository), then a table: major, passed, failed, skipped, time, SELECT version().
# MAJORS="15 18" chooses; fails on any failed or skipped test.
MAJORS ?= 15 16 17 18
test-matrix:
	GO_TEST_FLAGS="$(GO_TEST_FLAGS)" scripts/test-matrix.sh $(MAJORS)

# The whole thing on an embedded throwaway PostgreSQL; cleans up after itself.
demo:
	go run ./cmd/qldemo

# Part of the suite through testcontainers-go on a real Docker engine, offline (issue 36): starts
# dockerd when none answers (and stops it), builds a PostgreSQL 15 image from this machine's own
# binaries (scripts/pg-image.sh; nothing is pulled), runs the migrations, the coordinator, the
# verifier and a fault gate with QL_TEST_SOURCE=docker, then fails if a container, image, layer,
# volume or network is left. QL_PG_IMAGE names the tag; KEEP_IMAGE=1 keeps the image.
.PHONY: test-containers
test-containers:
	GO_TEST_FLAGS="$(GO_TEST_FLAGS)" scripts/test-containers.sh

# Mutation testing (docs/testing.md): each mutation of internal/testkit/mutate/mutations.txt, applied one
# at a time to a copy of HEAD (commit first; MUTATE_FLAGS="-tree worktree" takes the checkout as it
# is), with the tests that must kill it; fails unless every one is killed. MUTATE_SUBSET=ci, or
# `make mutate-fast`, runs the fast list CI runs. MUTATE_FLAGS="-doc docs/testing.md" writes the
# table there.
.PHONY: mutate mutate-fast
MUTATE_SUBSET ?=
MUTATE_FLAGS ?=
mutate:
	go run ./internal/testkit/mutate -subset "$(MUTATE_SUBSET)" $(MUTATE_FLAGS)

mutate-fast:
	@$(MAKE) --no-print-directory mutate MUTATE_SUBSET=ci

# The fault and HA gates of issue #5 (internal/testkit/faults, build tag "faults", so `make test` does not
# run them twice) and the fault proxy's own tests: backend termination, physical promotion,
# raw-wire COMMIT-response loss, network partition, the same faults through PgBouncer in
# transaction and session pooling (TestGatePooler*), the closed loop's process gates
# (TestGateDispatch*: worker SIGKILL/SIGSTOP, dispatcher SIGKILL, cancel, token revoke, a lost
# ACK/completion answer, a worker partition, PgBouncer; docs/dispatch.md), and a short chaos soak (the CI_CHAOS
# settings). Each gate starts its own PostgreSQL servers and fails, never skips, when it cannot.
.PHONY: test-faults test-faults-matrix chaos
FAULTS_TEST_FLAGS ?= -count=1 -timeout 30m -v
CI_CHAOS ?= QL_CHAOS_DURATION=75s QL_CHAOS_REPLICAS=3 QL_CHAOS_TRIGGERS=100
test-faults:
	go vet -tags faults ./internal/testkit/faults/
	@bash -o pipefail -c 'log=$$(mktemp); $(CI_CHAOS) go test -tags faults $(FAULTS_TEST_FLAGS) ./internal/testkit/faultproxy/ ./internal/testkit/faults/ 2>&1 | tee "$$log"; status=$$?; \
	  if grep -q -- "--- SKIP" "$$log"; then echo "test-faults: a gate was skipped, and a skip is not a pass"; status=1; fi; rm -f "$$log"; exit $$status'

# The fault gates once per PostgreSQL major (MAJORS), each on that major's server binaries
# (scripts/pg-bin.sh); where they lack pg_basebackup, the promotion gate's standby comes from the
# low-level backup API.
test-faults-matrix:
	@for major in $(MAJORS); do \
	  echo "== fault gates on PostgreSQL $$major"; \
	  bin=$$(scripts/pg-bin.sh $$major) && QL_PG_BIN=$$bin $(MAKE) --no-print-directory test-faults || exit 1; \
	done

# The long chaos soak: CHAOS_REPLICAS `qlsched run` processes, CHAOS_TRIGGERS every-second
# triggers, random SIGKILL / SIGSTOP+SIGCONT / restarts for CHAOS_DURATION, then the audit and its
# summary. QL_CHAOS_SEED=N fixes the fault plan (internal/testkit/chaos: times from the start, kinds, hold
# times), not which replica holds a claim when an aimed fault lands.
# CHAOS_BATCHES is each replica's --admit-batch (cycled over the replicas). 500 every-second
# triggers are more than one-row admission carries on a 2-core machine with margin (four
# replicas and the server: lag p99 about 950 ms against the 1 s period even before faults), so
# any slow second there becomes a fire_once loss the audit cannot excuse; batches of 16 keep the
# load well under capacity. CI's short soak (CI_CHAOS) runs one-row admission.
CHAOS_DURATION ?= 10m
CHAOS_REPLICAS ?= 4
CHAOS_TRIGGERS ?= 500
CHAOS_BATCHES ?= 16
chaos:
	QL_CHAOS_DURATION=$(CHAOS_DURATION) QL_CHAOS_REPLICAS=$(CHAOS_REPLICAS) QL_CHAOS_TRIGGERS=$(CHAOS_TRIGGERS) QL_CHAOS_BATCHES=$(CHAOS_BATCHES) \
	  nice go test -tags faults -count=1 -timeout 120m -v -run '^TestChaosSoak$$' ./internal/testkit/faults/

# The performance figures of docs/performance.md, each run on a throwaway PostgreSQL (fsync on).
# First, in about 5 minutes: the 4-replica backlog against its ceiling, the below-capacity lag,
# batch admission at 20,000 every-second triggers, one real replica process at budget 256 (RSS),
# and the claim's p99 at 1,000,000 schedule rows against 10,000. Then the bursts (bench-burst,
# about 25 minutes) and the replicas through PgBouncer against direct (bench-pooler, about 3
# minutes; it needs pgbouncer and psql, and `make bench` checks for them before its first run).
.PHONY: bench bench-river bench-burst bench-replicas bench-pooler bench-scale
# The peer: River's periodic jobs, 20,000 every second, on a throwaway server from the same
# binaries (bench/river, a module of its own so River stays out of go.mod). Run it next to
# `make bench` for the batch comparison of docs/performance.md.
bench-river:
	cd bench/river && go run . --jobs 20000 --duration 30s

# The peer under the same faults (issue 22): PEER_REPLICAS River clients with PEER_JOBS periodic
# jobs every second, then as many `qlsched run` processes with as many every-second triggers, put
# through one fault plan (seed PEER_SEED; 0 draws one and prints it) for PEER_DURATION on one
# throwaway server, and one audit by scheduled second, printed as one table (bench/river chaos,
# internal/testkit/chaos): admitted within 1 s, within 60 s (qlsched's default misfire grace),
# ever; each qlsched miss tied to the fault that stranded its claim; the duplicate attempts each
# system refused (fence, unique key). The qlsched rows: tuned (lease 3s, cadence 500ms, grace
# 1s), qlsched-grace (the same at the default grace) and qlsched-default (default lease, cadence
# and grace, budget sized for the load). PEER_SYSTEMS=river-plain,... adds River on its defaults.
# The docs/performance.md sitting: PEER_JOBS=100, PEER_DURATION=5m. peer-chaos-short is the
# CI-sized run (N = 50, D = 45 s, seed 22, River and tuned qlsched): about 2 minutes.
.PHONY: peer-chaos peer-chaos-short
PEER_JOBS ?= 100
PEER_REPLICAS ?= 3
PEER_DURATION ?= 5m
PEER_SEED ?= 0
PEER_SYSTEMS ?= qlsched-default,qlsched-grace,qlsched,river
peer-chaos:
	go build -o bin/qlsched ./cmd/qlsched
	cd bench/river && go run . chaos --qlsched ../../bin/qlsched --jobs $(PEER_JOBS) --replicas $(PEER_REPLICAS) \
	  --duration $(PEER_DURATION) --seed $(PEER_SEED) --systems $(PEER_SYSTEMS)

peer-chaos-short:
	@$(MAKE) --no-print-directory peer-chaos PEER_JOBS=50 PEER_DURATION=45s PEER_SEED=22 PEER_SYSTEMS=river,qlsched

# peer-chaos-loop is the same plan over the whole loop, audited by execution: River's clients
# working the periodic jobs, and qlsched run + dispatch + qlworker (docs/performance.md, "The peer
# under faults, whole loop"). CI does not run it.
.PHONY: peer-chaos-loop
PEER_LOOP_JOBS ?= 10
PEER_LOOP_DURATION ?= 45s
PEER_LOOP_SEED ?= 22
peer-chaos-loop:
	go build -o bin/qlsched ./cmd/qlsched
	go build -o bin/qlworker ./cmd/qlworker
	cd bench/river && go run . chaos --qlsched ../../bin/qlsched --qlworker ../../bin/qlworker --jobs $(PEER_LOOP_JOBS) \
	  --replicas $(PEER_REPLICAS) --duration $(PEER_LOOP_DURATION) --seed $(PEER_LOOP_SEED) --systems river-exec,qlsched-loop

bench:
	scripts/bench-pooler.sh --check # its last part, before the long runs
	go build -o bin/ ./cmd/...
	bin/qlbench --scenario backlog --triggers 10000 --replicas 4 --budget 256 --cadence 10ms --duration 30s
	bin/qlbench --scenario steady --triggers 1000 --replicas 2 --budget 16 --cadence 1s --duration 65s
	bin/qlbench --scenario backlog --every second --triggers 20000 --replicas 4 --budget 256 --cadence 10ms --admit-batch 128 --duration 20s
	bin/qlbench --scenario backlog --triggers 5000 --replicas 1 --budget 256 --cadence 10ms --duration 20s --processes
	go test -count=1 -run '^$$' -bench BenchmarkClaim -benchtime 3000x ./coordinator/
	@$(MAKE) --no-print-directory bench-burst
	@$(MAKE) --no-print-directory bench-pooler

# Issue 33's loop end to end, beside River (docs/performance.md, The loop; docs/dispatch.md,
# Sizing): LOOP_TRIGGERS every-second triggers through one `qlsched run`, LOOP_DISPATCHERS
# `qlsched dispatch` and LOOP_WORKERS `qlworker` processes (LOOP_CAPACITY slots each) running
# ["true"] for LOOP_DURATION, then the loop's own ceiling (LOOP_CEILING pre-admitted Runs drained
# by the same processes); then River on a throwaway server from the same binaries, as many
# periodic jobs every second worked by one client with as many slots, each job running `true`;
# one table with the ratios. About 2½ minutes on the 2-core machine. Not run by make test or CI.
.PHONY: bench-loop bench-loop-segments
LOOP_TRIGGERS ?= 20
LOOP_DISPATCHERS ?= 2
LOOP_WORKERS ?= 4
LOOP_CAPACITY ?= 4
LOOP_DURATION ?= 40s
LOOP_CEILING ?= 1000
bench-loop:
	go build -o bin/ ./cmd/...
	bin/qlbench --scenario loop --triggers $(LOOP_TRIGGERS) --dispatchers $(LOOP_DISPATCHERS) --workers $(LOOP_WORKERS) \
	  --capacity $(LOOP_CAPACITY) --duration $(LOOP_DURATION) --ceiling-runs $(LOOP_CEILING) --format json > bin/bench-loop.json
	cd bench/river && go run . loop --jobs $(LOOP_TRIGGERS) --workers $(LOOP_WORKERS) --capacity $(LOOP_CAPACITY) \
	  --duration $(LOOP_DURATION) --against ../../bin/bench-loop.json

# The loop's admitted → running cut into segments (docs/dispatch.md, "Where admitted → running
# goes"), without the ceiling or River: LOOP_TRIGGERS=5 LOOP_DURATION=65s gives ≥ 300 Runs; each
# Run's times go to bin/bench-loop-runs.tsv (--segments-file).
bench-loop-segments:
	go build -o bin/ ./cmd/...
	bin/qlbench --scenario loop --triggers $(LOOP_TRIGGERS) --dispatchers $(LOOP_DISPATCHERS) --workers $(LOOP_WORKERS) \
	  --capacity $(LOOP_CAPACITY) --duration $(LOOP_DURATION) --ceiling-runs 0 --segments-file bin/bench-loop-runs.tsv

# Issue 20's bursts: N triggers sharing one minute-aligned spec, two minute boundaries each, N =
# 10,000 and 50,000, one and four in-process replicas, single and batch admission, each burst's
# drain time and lag against the batch ceiling of the same write set in the same run. Each run
# waits for a minute boundary: 25 minutes in all on the quiet 2-core machine (2026-12-05). --duration bounds the drain of the last
# burst (single mode at 50,000 takes longer than the minute between bursts here).
BURST_FLAGS ?= --bursts 2 --budget 256 --cadence 10ms
bench-burst:
	go build -o bin/ ./cmd/...
	bin/qlbench --scenario burst --triggers 10000 --replicas 1 $(BURST_FLAGS) --duration 1m
	bin/qlbench --scenario burst --triggers 10000 --replicas 4 $(BURST_FLAGS) --duration 1m
	bin/qlbench --scenario burst --triggers 10000 --replicas 1 $(BURST_FLAGS) --admit-batch 128 --duration 1m
	bin/qlbench --scenario burst --triggers 10000 --replicas 4 $(BURST_FLAGS) --admit-batch 128 --duration 1m
	bin/qlbench --scenario burst --triggers 50000 --replicas 1 $(BURST_FLAGS) --duration 3m
	bin/qlbench --scenario burst --triggers 50000 --replicas 4 $(BURST_FLAGS) --duration 3m
	bin/qlbench --scenario burst --triggers 50000 --replicas 1 $(BURST_FLAGS) --admit-batch 128 --duration 1m
	bin/qlbench --scenario burst --triggers 50000 --replicas 4 $(BURST_FLAGS) --admit-batch 128 --duration 1m

# Issue 37's scale: 20 projects, 100,000 triggers through apply, 2,000,000 Runs of history written
# set-based (outside the product path), every operator read timed against its target, and a mass
# publish of 20,000 triggers next to an every-second trigger (two replicas at the defaults). The
# table it prints is the one of docs/performance.md, "Scale". About 40 minutes on the 2-core
# machine, most of it writing the data set; SCALE_FLAGS scales it (--triggers, --projects,
# --history-runs, --mass-publish, --init-wait, --samples). The CI-sized check of the same reads is
# TestScaleReadsDoNotGrowWithHistory (internal/app/bench), which make test runs.
SCALE_FLAGS ?= --samples 5 --init-wait 4m
bench-scale:
	go build -o bin/ ./cmd/...
	bin/qlbench --scenario scale $(SCALE_FLAGS)

# The replica-count curve of docs/operations.md (Sizing): the same backlog with 1, 2, 4 and 8
# in-process replicas, single and batch admission, each against its ceiling of the same run.
bench-replicas:
	go build -o bin/ ./cmd/...
	for r in 1 2 4 8; do bin/qlbench --scenario backlog --triggers 10000 --replicas $$r --budget 256 --cadence 10ms --duration 20s || exit 1; done
	for r in 1 2 4 8; do bin/qlbench --scenario backlog --every second --triggers 20000 --replicas $$r --budget 256 --cadence 10ms --admit-batch 128 --duration 15s || exit 1; done

# Real `qlsched run` processes against in-process replicas, in one sitting (docs/performance.md,
# Real processes against in-process replicas): 2 replicas, batch 128, 20,000 every-second
# triggers, in-process then processes, PROC_PAIRS times, each against the batch ceiling of its own
# run (the report's batch ceiling ratio). PROC_PROFILE=dir adds Go CPU profiles (qlbench's
# --cpu-profile: dir/<pair>-in-process/, dir/<pair>-processes/). About 3 minutes a pair.
.PHONY: bench-processes
PROC_PAIRS ?= 2
PROC_FLAGS ?= --scenario backlog --every second --triggers 20000 --replicas 2 --budget 256 --cadence 10ms --admit-batch 128 --duration 20s
bench-processes:
	go build -o bin/ ./cmd/...
	for i in $$(seq $(PROC_PAIRS)); do for kind in in-process processes; do \
	  flags="$(PROC_FLAGS)"; [ $$kind = processes ] && flags="$$flags --processes"; \
	  [ -n "$(PROC_PROFILE)" ] && mkdir -p $(PROC_PROFILE)/$$i-$$kind && flags="$$flags --cpu-profile $(PROC_PROFILE)/$$i-$$kind"; \
	  echo "== pair $$i, $$kind"; bin/qlbench $$flags || exit 1; done; done

# A/B of bench-processes in one sitting: the binaries of BASE_REF (git archive of that commit,
# built in a temporary directory) against this tree's, alternately: per pair, processes base then
# this tree, then in-process base then this tree, each against its own batch ceiling
# (scripts/bench-processes-ab.sh prints the load before each run). About 6 minutes a pair.
.PHONY: bench-processes-ab
BASE_REF ?= main
AB_PAIRS ?= 1
bench-processes-ab:
	go build -o bin/ ./cmd/...
	base=$$(mktemp -d) && git archive $(BASE_REF) | tar -x -C $$base && (cd $$base && go build -o bin/ ./cmd/...) && \
	  AB_PAIRS=$(AB_PAIRS) PROC_FLAGS="$(PROC_FLAGS)" scripts/bench-processes-ab.sh $$base/bin bin; rc=$$?; rm -rf $$base; exit $$rc

# The bench through PgBouncer against direct, in one sitting (docs/performance.md, Through
# PgBouncer): a throwaway server, PgBouncer in transaction and in session pooling in front of it,
# and the same 30,000-trigger backlog three times with real replica processes, each run on a
# database of its own. About 3 minutes; needs pgbouncer and psql (scripts/bench-pooler.sh says
# what else it reads: BENCH_FLAGS, ORDER, ROUNDS, TX_POOL, SESSION_POOL, QL_PG_BIN).
bench-pooler: build
	scripts/bench-pooler.sh

# An A/B of two commits through bench-pooler, in one sitting: AB_BASE (another worktree, its bin/
# built there with `go build -o bin/ ./cmd/...`) and this tree, alternating, AB_PAIRS times each,
# the same AB_FLAGS and AB_ORDER for both (each tree's own scripts/bench-pooler.sh and bin/).
# Compare each run's transaction admits/s against its own direct run's. About 7 minutes a pair.
AB_PAIRS ?= 2
AB_ORDER ?= direct transaction
AB_FLAGS ?= --scenario backlog --triggers 30000 --replicas 4 --budget 256 --cadence 10ms --duration 30s
.PHONY: bench-pooler-ab
bench-pooler-ab: build
	@[ -x "$(AB_BASE)/bin/qlbench" ] && [ -x "$(AB_BASE)/scripts/bench-pooler.sh" ] \
	  || { echo "bench-pooler-ab: AB_BASE=<a worktree with bin/ built> is required" >&2; exit 2; }
	for i in $$(seq $(AB_PAIRS)); do for w in "$(AB_BASE)" "$(CURDIR)"; do \
	  echo "### $$w, pair $$i, $$(date -u +%T), $$(uptime)"; \
	  ORDER="$(AB_ORDER)" BENCH_FLAGS="$(AB_FLAGS)" "$$w/scripts/bench-pooler.sh" || exit 1; done; done
