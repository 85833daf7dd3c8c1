#!/usr/bin/env bash
# A/B of the batch bench (docs/performance.md, Real processes against in-process replicas):
# base's binaries against this tree's, alternately, in one sitting. For each of AB_PAIRS pairs
# and each kind (processes, then in-process) it runs base, then this tree, with PROC_FLAGS (the
# Makefile's bench-processes settings), and prints each run's batch ceiling ratio line.
# Usage: scripts/bench-processes-ab.sh BASE_BIN_DIR [NEW_BIN_DIR]   (dirs holding qlbench and qlsched)
set -euo pipefail
base=${1:?usage: $0 BASE_BIN_DIR [NEW_BIN_DIR] (directories holding qlbench and qlsched)}
new=${2:-bin}
pairs=${AB_PAIRS:-1}
flags=${PROC_FLAGS:---scenario backlog --every second --triggers 20000 --replicas 2 --budget 256 --cadence 10ms --admit-batch 128 --duration 20s}
kinds=${AB_KINDS:-processes in-process}
for d in "$base" "$new"; do
  [ -x "$d/qlbench" ] && [ -x "$d/qlsched" ] || { echo "$d: no qlbench and qlsched there" >&2; exit 2; }
done
for i in $(seq "$pairs"); do
  for kind in $kinds; do
    extra=""; [ "$kind" = processes ] && extra="--processes"
    for side in base new; do
      dir=$base; [ $side = new ] && dir=$new
      echo "== pair $i, $kind, $side ($dir), $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
      # shellcheck disable=SC2086
      "$dir/qlbench" $flags $extra --qlsched "$dir/qlsched" 2>&1 | grep -E "^  (admits|batch ceiling|rounds|claim|retries)" || true
    done
  done
done
