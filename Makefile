SQLC := go tool -modfile=tools/go.mod sqlc

.PHONY: generate check-generated lint test demo

generate:
	$(SQLC) generate

check-generated:
	$(SQLC) diff

