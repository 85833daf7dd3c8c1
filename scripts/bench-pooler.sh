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
#   BENCH_FLAGS   the bench's flags (default: a 30,000-trigger backlog, 4 replicas, 30 s: more than a
#                 direct run admits in 30 s, ~470/s on a quiet 2 cores, so no run drains it and the
#                 after-phase's ceiling still finds rows due; 10,000 drained before the end)
#   ORDER         the runs, in order, each at most once (default "direct transaction session")
#   ROUNDS        how many times the runs are made (default 1), in ORDER in odd rounds and in the
#                 reverse order in even ones, each on a database of its own; then a summary: each
#                 round's rates and ratios to its direct run, and the median ratio per path. A
#                 single-mode run is commit-bound, and the server's slow WAL flushes fall in one run
#                 or another: one round's ratio is that as much as the pooler. The summary also
#                 divides each run's admits by its own batch ceiling (measured before and after it,
#                 on the same server) first: the server's capacity drifts between the runs of one
#                 sitting (689–1,131/s in one), and that line compares the paths without it
#   TX_POOL       transaction pooling's default_pool_size (default 4)
#   SESSION_POOL  session pooling's default_pool_size (default 20)
#   QL_PG_BIN     the PostgreSQL server binaries (default as the bench finds them: pg_config
#                 --bindir, then the newest /usr/lib/postgresql/*/bin)
#
# Needs bin/qlbench, bin/qlsched and bin/qlmigrate (make bench-pooler builds them), pgbouncer and psql
# (Debian's pgbouncer and postgresql-client). As root, PostgreSQL and PgBouncer run as the postgres
# user. Both are stopped on every exit, and their files removed, except after a failure: then the
# folder (server and PgBouncer logs, the bench's stderr) is kept and named.
#
# With --check it only checks what it needs from the machine (server binaries, psql, pgbouncer,
# the postgres user as root) and exits: `make bench` runs that first, before its long runs.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "bench-pooler.sh: $*" >&2; exit 1; }

flags=${BENCH_FLAGS:---scenario backlog --triggers 30000 --replicas 4 --budget 256 --cadence 10ms --duration 30s}
read -r -a flag_words <<< "$flags"
order=${ORDER:-direct transaction session}
rounds=${ROUNDS:-1}
[[ $rounds =~ ^[1-9]$ ]] || die "ROUNDS: \"$rounds\" is not a number of rounds (1 … 9)"
tx_pool=${TX_POOL:-4}
session_pool=${SESSION_POOL:-20}
seen=" "
for r in $order; do
  case "$r" in direct|transaction|session) ;; *) die "ORDER: unknown run \"$r\" (want direct, transaction or session)" ;; esac
  [[ $seen != *" $r "* ]] || die "ORDER: \"$r\" twice (each run has a database of its own)"
  seen+="$r "
done
for n in "$tx_pool" "$session_pool"; do
  [[ $n =~ ^[1-9][0-9]{0,3}$ ]] || die "TX_POOL, SESSION_POOL: \"$n\" is not a pool size (1 … 9999)"
done
pgbin=${QL_PG_BIN:-}
if [[ -z $pgbin ]]; then
  pgbin=$(pg_config --bindir 2>/dev/null || true)
  [[ -x $pgbin/initdb ]] || pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
fi
for b in "$pgbin/initdb" "$pgbin/pg_ctl" "$pgbin/postgres"; do
  [[ -x $b ]] || die "$b is missing (set QL_PG_BIN to the server binaries)"
done
psql=$(command -v psql || echo "$pgbin/psql")
[[ -x $psql ]] || die "psql is missing: apt-get install postgresql-client"
bouncer=$(command -v pgbouncer || true)
[[ -n $bouncer ]] || for p in /usr/sbin/pgbouncer /usr/bin/pgbouncer; do [[ -x $p ]] && bouncer=$p; done
[[ -n $bouncer ]] || die "pgbouncer is missing: apt-get install pgbouncer"
if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
  die "as root, a postgres user runs the server and PgBouncer (both refuse root): there is none"
fi
case "${1:-}" in
  "") ;;
  --check) exit 0 ;;
  *) die "unknown argument \"$1\" (the only one is --check; the settings are environment variables)" ;;
esac
for b in bin/qlbench bin/qlsched bin/qlmigrate; do
  [[ -x $b ]] || die "$b is missing (run it as make bench-pooler)"
done

as_server() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# free_port prints a port nothing listens on at 127.0.0.1, from a random start. If something
# takes it before the server binds it, the server fails to start, and so does the script.
free_port() {
  local p=$((20000 + RANDOM % 30000))
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

dir=$(mktemp -d /tmp/ql-bench-pooler-XXXXXX)
bouncer_pids=()
keep=
cleanup() {
  for pid in "${bouncer_pids[@]}"; do kill "$pid" 2>/dev/null || true; done # runuser passes it on
  for pidfile in "$dir"/*.pid; do [[ -f $pidfile ]] && { kill "$(cat "$pidfile")" 2>/dev/null || true; }; done
  as_server "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  if [[ -n $keep ]]; then echo "bench-pooler.sh: logs kept in $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ $(id -u) -eq 0 ]]; then chown postgres: "$dir"; fi

pg_port=$(free_port)
# Checkpoints only when qlbench asks (CHECKPOINT before each phase, in its settle), as on qlbench's
# own servers (pgcluster.BenchSettings): a checkpoint set off by one path's WAL fell in the next
# path's run (the second and third of one sitting at 0.19 and 0.26 × the first).
as_server "$pgbin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
as_server "$pgbin/pg_ctl" -D "$dir/data" -w -l "$dir/server.log" -o "-p $pg_port -k $dir -c listen_addresses=127.0.0.1 \
  -c max_connections=300 -c shared_buffers=128MB -c max_pred_locks_per_transaction=64 -c timezone=UTC \
  -c max_wal_size=16GB -c checkpoint_timeout=1h" start >/dev/null \
  || { keep=1; die "PostgreSQL did not start: $(tail -5 "$dir/server.log" 2>/dev/null)"; }

# start_bouncer MODE POOL_SIZE starts a PgBouncer with pool_mode MODE and sets bouncer_port. It
# runs in this shell, not in a command substitution, so that cleanup knows its process.
start_bouncer() {
  local mode=$1 size=$2 port pid
  port=$(free_port)
  printf '"postgres" ""\n"ql_runtime" ""\n' > "$dir/users.txt"
  printf '%s\n' "[databases]" "* = host=127.0.0.1 port=$pg_port" "[pgbouncer]" \
    "listen_addr = 127.0.0.1" "listen_port = $port" "unix_socket_dir =" "auth_type = trust" \
    "auth_file = $dir/users.txt" "pool_mode = $mode" "default_pool_size = $size" "max_client_conn = 200" \
    "logfile = $dir/$mode.log" "pidfile = $dir/$mode.pid" > "$dir/$mode.ini"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$dir/users.txt" "$dir/$mode.ini"; fi
  as_server "$bouncer" "$dir/$mode.ini" >>"$dir/$mode.out" 2>&1 &
  pid=$!
  bouncer_pids+=("$pid")
  # Ready: its pidfile written and the port answering while it still runs. A PgBouncer that
  # cannot bind the port exits, and another program answering there must not pass for it.
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    if [[ -s $dir/$mode.pid ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      bouncer_port=$port
      return
    fi
    sleep 0.1
  done
  keep=1
  die "pgbouncer ($mode) did not start on port $port: $(tail -3 "$dir/$mode.out" "$dir/$mode.log" 2>/dev/null)"
}
start_bouncer transaction "$tx_pool"
tx_port=$bouncer_port
start_bouncer session "$session_pool"
session_port=$bouncer_port

server=postgres://postgres@127.0.0.1:$pg_port
echo "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') on :$pg_port, $("$bouncer" --version | head -1) in transaction pooling on :$tx_port (pool $tx_pool) and session pooling on :$session_port (pool $session_pool)"
echo "bench flags: $flags"
reversed=$(echo "$order" | tr ' ' '\n' | grep . | tac | tr '\n' ' ')
declare -A rate share # round:run → admits per second, and that ÷ the run's own batch ceiling
for round in $(seq "$rounds"); do
for run in $([[ $((round % 2)) -eq 1 ]] && echo "$order" || echo "$reversed"); do
  db=bench_${run}_$round
  case "$run" in
    direct) runtime=postgres://ql_runtime@127.0.0.1:$pg_port/$db ;;
    transaction) runtime=postgres://ql_runtime@127.0.0.1:$tx_port/$db ;;
    session) runtime="postgres://ql_runtime@127.0.0.1:$session_port/$db?ql_pooler=session" ;;
  esac
  "$psql" -X -q "$server/postgres" -c "CREATE DATABASE $db" >/dev/null
  bin/qlmigrate roles create --database-url "$server/$db" >/dev/null
  bin/qlmigrate up --database-url "$server/$db" >/dev/null
  echo
  echo "== $run${ROUNDS:+, round $round}: replicas connect to $runtime"
  bin/qlbench "${flag_words[@]}" --processes --database-url "$server/$db" --runtime-url "$runtime" 2>>"$dir/bench.log" \
    > "$dir/run.txt" || { keep=1; tail -20 "$dir/bench.log" >&2; die "the $run run failed"; }
  cat "$dir/run.txt"
  rate[$round:$run]=$(awk '$1 == "admits" { gsub(/[()\/s]/, "", $3); print $3; exit }' "$dir/run.txt")
  share[$round:$run]=$(awk '$1 == "ceiling" && $3 == "ratio" { print $4; exit }' "$dir/run.txt")
done
done
if [[ $rounds -gt 1 && $seen == *" direct "* ]]; then
  echo
  echo "== summary: admits/s per round (× its round's direct run), and the median ratio per path;"
  echo "   then each run's admits ÷ its own ceiling (measured before and after it on the same server,"
  echo "   which drifts between runs of one sitting), × its round's direct run's, and the median"
  median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
  for kind in rate share; do
    for run in $order; do
      ratios=()
      line="$run:"
      for round in $(seq "$rounds"); do
        if [[ $kind == rate ]]; then r=${rate[$round:$run]} d=${rate[$round:direct]}; else r=${share[$round:$run]} d=${share[$round:direct]}; fi
        ratio=$(awk -v r="$r" -v d="$d" 'BEGIN { printf "%.2f", (d > 0 ? r / d : 0) }')
        ratios+=("$ratio")
        if [[ $kind == rate ]]; then line+=" $r/s (${ratio})"; else line+=" ${r} of its ceiling (${ratio})"; fi
      done
      echo "  $line; median × direct $(printf '%s\n' "${ratios[@]}" | median)"
    done
  done
fi
