#!/usr/bin/env bash
# make test-containers: part of the suite through testcontainers-go on a real Docker engine,
# offline.
#   1. a Docker engine: the one DOCKER_HOST (or the default socket) reaches, else a dockerd this
#      script starts on a socket and data root of its own (overlay2, else vfs) and stops at the end,
#      also on failure;
#   2. the PostgreSQL image QL_PG_IMAGE (default ql-test-postgres:15-local), built from this
#      machine's PostgreSQL 15 binaries by scripts/pg-image.sh: nothing is pulled;
#   3. the tests with QL_TEST_SOURCE=docker (testpg takes Docker only, never local binaries) and
#      Ryuk disabled: the migrations, the coordinator, the verifier, the source check of
#      internal/testkit/pgmajors and one fault gate (TestGateBackendTermination). Every test
#      binary's server must have come from testcontainers on that image (QL_TEST_SERVER_LOG);
#      a skipped test fails the target;
#   4. the image is removed (KEEP_IMAGE=1 keeps it), then no container, image, layer, volume or
#      network may be left that was not there before: the target fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

image=${QL_PG_IMAGE:-ql-test-postgres:15-local}
keep=${KEEP_IMAGE:-0}
flags=${GO_TEST_FLAGS:--count=1 -timeout 20m}
command -v docker >/dev/null || { echo "test-containers: no docker client (apt-get install docker.io)" >&2; exit 1; }

work=$(mktemp -d /tmp/ql-test-containers.XXXXXX)
started_pid=""
made_bridge=0
built=0
status=0

# Everything new since the snapshot, by kind: "containers", "images", "volumes", "networks", "layers".
snapshot() {
  docker ps -aq --no-trunc | sort >"$work/$1.containers"
  docker images -aq --no-trunc | sort -u >"$work/$1.images"
  docker volume ls -q | sort >"$work/$1.volumes"
  docker network ls -q --no-trunc | sort >"$work/$1.networks"
  local dir
  dir="$(docker info -f '{{.DockerRootDir}}/{{.Driver}}')"
  [[ -d "$dir/dir" ]] && dir="$dir/dir" # vfs
  if [[ -r "$dir" ]]; then ls "$dir" | grep -vx l | sort >"$work/$1.layers" || true; else : >"$work/$1.layers"; fi
}
new_since_start() { comm -13 "$work/before.$1" "$work/after.$1"; }

cleanup() {
  local rc=$?
  set +e
  if docker info >/dev/null 2>&1 && [[ -f "$work/before.containers" ]]; then
    # a backstop after the check below: whatever this run left is removed, pass or fail
    snapshot after
    new_since_start containers | xargs -r docker rm -f >/dev/null
    if [[ "$built" == 1 && "$keep" != 1 ]]; then docker rmi -f "$image" >/dev/null 2>&1; fi
    new_since_start networks | xargs -r docker network rm >/dev/null
    new_since_start volumes | xargs -r docker volume rm -f >/dev/null
  fi
  if [[ -n "$started_pid" ]]; then
    echo "== stopping the dockerd this run started (pid $started_pid)"
    kill -TERM "$started_pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$started_pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$started_pid" 2>/dev/null && { echo "test-containers: dockerd $started_pid did not stop; killed" >&2; kill -KILL "$started_pid"; }
    # mounts the daemon left under its data root would keep rm from removing it
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
    [[ "$made_bridge" == 1 ]] && ip link delete docker0 2>/dev/null
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. A Docker engine.
if docker info >/dev/null 2>&1; then
  echo "== Docker engine: $(docker info -f '{{.ServerVersion}} ({{.Driver}})') at ${DOCKER_HOST:-the default socket}"
else
  command -v dockerd >/dev/null || { echo "test-containers: no Docker engine answers and there is no dockerd to start (apt-get install docker.io)" >&2; exit 1; }
  [[ $(id -u) == 0 ]] || { echo "test-containers: no Docker engine answers, and starting dockerd needs root" >&2; exit 1; }
  ip link show docker0 >/dev/null 2>&1 || made_bridge=1
  export DOCKER_HOST="unix://$work/docker.sock"
  for driver in overlay2 vfs; do
    echo "== starting dockerd (storage driver $driver)"
    # a session of its own: a Ctrl-C reaches the tests, and this script stops the daemon after
    setsid dockerd --host "$DOCKER_HOST" --data-root "$work/root" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
      --storage-driver "$driver" >"$work/dockerd.log" 2>&1 &
    started_pid=$!
    for _ in $(seq 1 60); do
      docker info >/dev/null 2>&1 && break
      kill -0 "$started_pid" 2>/dev/null || break
      sleep 0.5
    done
    docker info >/dev/null 2>&1 && break
    echo "dockerd with $driver did not come up:" >&2; tail -5 "$work/dockerd.log" >&2
    kill -TERM "$started_pid" 2>/dev/null; wait "$started_pid" 2>/dev/null; started_pid=""
    rm -rf "$work/root" "$work/exec"
  done
  [[ -n "$started_pid" ]] || { echo "test-containers: could not start dockerd" >&2; exit 1; }
  echo "== Docker engine: $(docker info -f '{{.ServerVersion}} ({{.Driver}})'), started by this run"
fi

# 2. The image, offline. Kept (KEEP_IMAGE=1), it is part of what was there before.
build() {
  local start=$SECONDS
  scripts/pg-image.sh "$image"
  built=1
  echo "== image built in $((SECONDS - start))s"
}
if [[ "$keep" == 1 ]]; then
  if docker image inspect "$image" >/dev/null 2>&1; then echo "== image $image exists; KEEP_IMAGE=1 uses and keeps it"; else build; fi
  snapshot before
else
  docker image inspect "$image" >/dev/null 2>&1 && { echo "test-containers: image $image exists already; remove it, or KEEP_IMAGE=1 to use it" >&2; exit 1; }
  snapshot before
  build
fi

# 3. The tests, on Docker only.
servers="$work/servers.tsv"
log="$work/test.log"
: >"$servers"
run() {
  local rc
  set +e
  # shellcheck disable=SC2086
  env -u QL_TEST_DATABASE_URL -u QL_TEST_SKIP_DB QL_TEST_SOURCE=docker QL_PG_IMAGE="$image" QL_TEST_SERVER_LOG="$servers" \
    TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE="${TESTCONTAINERS_HOST_OVERRIDE:-127.0.0.1}" \
    go test $flags -v "$@" 2>&1 | tee -a "$log" | grep --line-buffered -E '^(--- |ok|FAIL|PASS|panic)'
  rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}
pkgs=(./internal/testkit/pgmajors ./internal/app/migrate ./internal/app/verify)
echo "== go test ${pkgs[*]} (QL_TEST_SOURCE=docker, image $image)"
# TestSettingsFromAlterSystemNameTheirSource starts a server of its own from local binaries
run -skip '^TestSettingsFromAlterSystemNameTheirSource$' "${pkgs[@]}" || status=1
# The coordinator's fence, claim, admit and round tests; its scale tests (a million schedules)
# stay with make test.
coordinator='^(TestClaimWritesTheFourPartFenceWithDatabaseTime|TestExpiryTakeoverConditions|TestFullFenceRaceSameOwnerName'
coordinator+='|TestAdmitWritesRunAttemptEventsAndAdvancesAtomically|TestAdmitRollsBackOnAnInjectedWriteFault'
coordinator+='|TestSkipAdvancesOnlyAndIsFenced|TestRepublishInvalidatesAnOutstandingClaim|TestTwoPoolsSingleClaimAndExactlyOneRun'
coordinator+='|TestARoundInitialisesABatchAndAdmitsTheDueTrigger|TestBatchAdmitOfTheSameClaimTwiceWritesOneRun|TestRacesAreCounted'
coordinator+='|TestClaimOrderNullsFirstThenDueTimeSkippingLockedRows|TestRuntimeRoleCannotCreateSchedules)$'
echo "== go test ./coordinator: fence, claim, admit, rounds (QL_TEST_SOURCE=docker)"
run -run "$coordinator" ./coordinator || status=1
echo "== fault gate TestGateBackendTermination (QL_TEST_SOURCE=docker)"
run -tags faults -run '^TestGateBackendTermination$' ./internal/testkit/faults/ || status=1
binaries=$((${#pkgs[@]} + 2))

if grep -q -- '--- SKIP' "$log"; then
  echo "test-containers: a test was skipped, and a skip is not a pass:"; grep -- '--- SKIP' "$log"; status=1
fi
if ! grep -q -- '--- PASS' "$log"; then echo "test-containers: no test passed"; status=1; fi
# Each test binary records its server: all must be testcontainers on $image, one per binary.
got=$(wc -l <"$servers")
other=$(awk -F'\t' '$3 != "testcontainers"' "$servers")
if [[ -n "$other" || "$got" -ne "$binaries" ]]; then
  echo "test-containers: want $binaries test binaries on testcontainers, the servers recorded were:"; cat "$servers"; status=1
else
  echo "== every test binary ($got) ran on testcontainers: $(cut -f2 "$servers" | sort -u | cut -c1-60)"
fi

# 4. Nothing left behind.
if [[ "$built" == 1 && "$keep" != 1 ]]; then
  docker rmi "$image" >/dev/null || status=1
fi
snapshot after
for kind in containers images volumes networks layers; do
  left=$(new_since_start "$kind")
  if [[ -n "$left" ]]; then
    echo "test-containers: $kind left behind:"; echo "$left"; status=1
  fi
done
if [[ "$keep" != 1 ]] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "test-containers: image $image left behind"; status=1
fi
(( status == 0 )) && echo "== test-containers: passed; no container, image, layer, volume or network left"
exit "$status"
