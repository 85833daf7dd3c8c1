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
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go run ./cmd/qlmigrate hash --check

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
	go run ./cmd/qlsched demo
