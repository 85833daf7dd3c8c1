#!/usr/bin/env bash
# scripts/test-matrix.sh [MAJOR…] — the whole `go test ./...` suite once per PostgreSQL major
# (default: 15 16 17 18), each on throwaway clusters started from that major's server binaries
# (scripts/pg-bin.sh MAJOR → QL_PG_BIN), one major after the other. Prints a table: major, exact
# server version (SELECT version(), recorded by internal/testkit/testpg in every test binary), passed,
# failed, skipped tests (subtests included, as `--- PASS/FAIL/SKIP` lines of go test -v), time.
#
# Exit 0 only when every major passed with no failed and no skipped test, and every test binary
# ran on the major it asked for. GO_TEST_FLAGS adds go test flags (default: -count=1 -timeout 30m);
# QL_MATRIX_LOGS keeps the logs in that folder (default: a temporary folder, kept on failure).
# QL_MATRIX_EXCLUDE, an extended regular expression, leaves out the packages whose import paths
# match it (CI leaves out those whose use of the server does not depend on its major: the bench,
# the console's browser test, the demo, the Kubernetes manifests; `make test` runs them on 15).
set -uo pipefail
cd "$(dirname "$0")/.."

majors=("$@")
[[ ${#majors[@]} -gt 0 ]] || majors=(15 16 17 18)
read -r -a flags <<<"${GO_TEST_FLAGS:--count=1 -timeout 30m}"

if [[ -n ${QL_MATRIX_LOGS:-} ]]; then
  logs=$QL_MATRIX_LOGS
  mkdir -p "$logs"
else
  logs=$(mktemp -d /tmp/ql-matrix-XXXXXX)
fi

# The server must come from QL_PG_BIN: no external server, no opt-out.
unset QL_TEST_DATABASE_URL QL_TEST_SKIP_DB

pkgs=(./...)
if [[ -n ${QL_MATRIX_EXCLUDE:-} ]]; then
  mapfile -t pkgs < <(go list ./... | grep -vE "$QL_MATRIX_EXCLUDE")
  echo "== leaving out the packages matching $QL_MATRIX_EXCLUDE: $(go list ./... | grep -cE "$QL_MATRIX_EXCLUDE") of $(go list ./... | wc -l)"
fi

rows=()
ok=1
for major in "${majors[@]}"; do
  echo "== PostgreSQL $major"
  log=$logs/test-$major.log
  servers=$logs/servers-$major.tsv
  rm -f "$log" "$servers"
  if ! bin=$(scripts/pg-bin.sh "$major"); then
    rows+=("$major|(no binaries)|0|0|0|0s|FAIL")
    ok=0
    continue
  fi
  echo "   QL_PG_BIN=$bin go test ${flags[*]} -v (${#pkgs[@]} package patterns)"
  start=$SECONDS
  QL_PG_BIN=$bin QL_TEST_SERVER_LOG=$servers go test "${flags[@]}" -v "${pkgs[@]}" >"$log" 2>&1
  status=$?
  took=$((SECONDS - start))
  grep -E '^(ok|FAIL|panic)[[:space:]]' "$log" | sed 's/^/   /'
  passed=$(grep -cE '^ *--- PASS: ' "$log")
  failed=$(grep -cE '^ *--- FAIL: ' "$log")
  skipped=$(grep -cE '^ *--- SKIP: ' "$log")

  # Every test binary that used PostgreSQL wrote one line: all must be this major, one version.
  version="(none recorded)"
  result=ok
  if [[ -s $servers ]]; then
    mapfile -t versions < <(cut -f2 "$servers" | sort -u)
    wrong=$(awk -F'\t' -v m="$major" 'int($1 / 10000) != m' "$servers")
    version=${versions[0]}
    if [[ -n $wrong || ${#versions[@]} -ne 1 ]]; then
      echo "   test binaries ran on other servers than PostgreSQL $major:"
      sed 's/^/     /' "$servers"
      result=FAIL
    fi
  else
    echo "   no test binary recorded its server (internal/testkit/testpg did not start one)"
    result=FAIL
  fi
  if ((status != 0 || failed != 0 || skipped != 0)); then
    result=FAIL
  fi
  if ((status != 0)); then
    grep -B2 -A20 -E '^ *--- FAIL' "$log" | head -150 | sed 's/^/   /'
    grep -A15 -E '^(panic|FAIL[[:space:]].*\[(build|setup) failed\])' "$log" | head -60 | sed 's/^/   /'
  fi
  if ((skipped != 0)); then
    echo "   skipped tests are not a pass:"
    grep -E '^ *--- SKIP: ' "$log" | sed 's/^/   /'
  fi
  [[ $result == ok ]] || ok=0
  rows+=("$major|$version|$passed|$failed|$skipped|${took}s|$result")
done

echo
echo "== PostgreSQL matrix"
{
  echo "major|passed|failed|skipped|time|result|server version (SELECT version())"
  for row in "${rows[@]}"; do
    IFS='|' read -r major version passed failed skipped took result <<<"$row"
    echo "$major|$passed|$failed|$skipped|$took|$result|$version"
  done
} | awk -F'|' '{ printf "%-6s %7s %7s %8s %6s %-7s %s\n", $1, $2, $3, $4, $5, $6, $7 }'

if ((ok)); then
  [[ -n ${QL_MATRIX_LOGS:-} ]] || rm -rf "$logs"
  exit 0
fi
echo "matrix FAILED (a major with failed or skipped tests, or on the wrong server); go test -v logs in $logs"
exit 1
