#!/usr/bin/env bash
# scripts/bench-pooler.sh — the bench through PgBouncer against direct, in one sitting
# (`make bench-pooler`; docs/performance.md, "Through PgBouncer").
#
# Starts a throwaway PostgreSQL (fsync on) and two PgBouncers in front of it: transaction pooling
# (default_pool_size 4) and session pooling (default_pool_size 20). Then runs the same bench three
# times, each on a freshly migrated database of its own, with the replicas as real `qlsched run`
# processes connected as the runtime role:
#
#   direct       --runtime-url to the server
#   transaction  --runtime-url through transaction pooling, nothing in the URL (qlsched detects it)
#   session      --runtime-url through session pooling, with ql_pooler=session
#
# Publishing and the ceiling go to the server directly every time (--database-url), so the ratio
# of each run's admissions to the direct run's is what the pooler costs the replicas.
#
#   BENCH_FLAGS   the bench's flags (default: the 10,000-trigger backlog, 4 replicas, 30 s)
#   ORDER         the runs, in order (default "direct transaction session")
#   QL_PG_BIN     the PostgreSQL server binaries (default Debian's 15: /usr/lib/postgresql/15/bin)
#
# Needs bin/qlsched and bin/qlmigrate (make bench-pooler builds them) and pgbouncer (Debian's
# package). As root, PostgreSQL and PgBouncer run as the postgres user; both are stopped and their
# files removed on exit.
set -euo pipefail

die() { echo "bench-pooler.sh: $*" >&2; exit 1; }

flags=${BENCH_FLAGS:---scenario backlog --triggers 10000 --replicas 4 --budget 256 --cadence 10ms --duration 30s}
order=${ORDER:-direct transaction session}
pgbin=${QL_PG_BIN:-/usr/lib/postgresql/15/bin}
for r in $order; do
  case "$r" in direct|transaction|session) ;; *) die "ORDER: unknown run \"$r\" (want direct, transaction or session)" ;; esac
done
for b in bin/qlsched bin/qlmigrate "$pgbin/initdb" "$pgbin/pg_ctl"; do
  [[ -x $b ]] || die "$b is missing (run it as make bench-pooler; set QL_PG_BIN for other server binaries)"
done
psql=$(command -v psql || echo "$pgbin/psql")
[[ -x $psql ]] || die "psql is missing (Debian: postgresql-client)"
bouncer=$(command -v pgbouncer || true)
[[ -n $bouncer ]] || for p in /usr/sbin/pgbouncer /usr/bin/pgbouncer; do [[ -x $p ]] && bouncer=$p; done
[[ -n $bouncer ]] || die "pgbouncer is missing: apt-get install pgbouncer"

as_server() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# free_port prints a port nothing listens on at 127.0.0.1, from a random start.
free_port() {
  local p=$((20000 + RANDOM % 30000))
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

dir=$(mktemp -d /tmp/ql-bench-pooler-XXXXXX)
[[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
cleanup() {
  for pidfile in "$dir"/*.pid; do [[ -f $pidfile ]] && { kill "$(cat "$pidfile")" 2>/dev/null || true; }; done
  as_server "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

pg_port=$(free_port)
as_server "$pgbin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
as_server "$pgbin/pg_ctl" -D "$dir/data" -w -l "$dir/server.log" -o "-p $pg_port -k $dir -c listen_addresses=127.0.0.1 \
  -c max_connections=300 -c shared_buffers=128MB -c max_pred_locks_per_transaction=64 -c timezone=UTC" start >/dev/null

# start_bouncer MODE POOL_SIZE starts a PgBouncer with pool_mode MODE and sets bouncer_port (not
# in a command substitution: cleanup finds it by its pidfile).
start_bouncer() {
  local mode=$1 size=$2 port
  port=$(free_port)
  printf '"postgres" ""\n"ql_runtime" ""\n' > "$dir/users.txt"
  cat > "$dir/$mode.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pg_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = $mode
default_pool_size = $size
max_client_conn = 200
logfile = $dir/$mode.log
pidfile = $dir/$mode.pid
EOF
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir/users.txt" "$dir/$mode.ini"
  as_server "$bouncer" "$dir/$mode.ini" >/dev/null 2>&1 &
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { bouncer_port=$port; return; }
    sleep 0.1
  done
  die "pgbouncer ($mode) does not listen on $port: $(cat "$dir/$mode.log" 2>/dev/null)"
}
start_bouncer transaction 4
tx_port=$bouncer_port
start_bouncer session 20
session_port=$bouncer_port

server=postgres://postgres@127.0.0.1:$pg_port
echo "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') on :$pg_port, $("$bouncer" --version | head -1) in transaction pooling on :$tx_port (pool 4) and session pooling on :$session_port (pool 20)"
echo "bench flags: $flags"
for run in $order; do
  db=bench_$run
  case "$run" in
    direct) runtime=postgres://ql_runtime@127.0.0.1:$pg_port/$db ;;
    transaction) runtime=postgres://ql_runtime@127.0.0.1:$tx_port/$db ;;
    session) runtime="postgres://ql_runtime@127.0.0.1:$session_port/$db?ql_pooler=session" ;;
  esac
  "$psql" -q "$server/postgres" -c "CREATE DATABASE $db" >/dev/null
  bin/qlmigrate roles create --database-url "$server/$db" >/dev/null
  bin/qlmigrate up --database-url "$server/$db" >/dev/null
  echo
  echo "== $run: replicas connect to ${runtime%%\?*}$([[ $run == session ]] && echo '?ql_pooler=session')"
  # shellcheck disable=SC2086 # the flags are words
  bin/qlsched bench $flags --processes --database-url "$server/$db" --runtime-url "$runtime" 2>>"$dir/bench.log" \
    || { tail -20 "$dir/bench.log" >&2; die "the $run run failed"; }
done
