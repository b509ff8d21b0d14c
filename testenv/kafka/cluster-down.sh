#!/usr/bin/env bash
# cluster-down.sh: stop the nodes cluster-up.sh started. SIGTERM runs each node's controlled
# shutdown (all nodes at once: a node that waits for a quorum that is already leaving would
# otherwise hold the others up); after KAFKA_STOP_TIMEOUT seconds (30) a node still running is
# killed. Exits 0 when nothing was running. With --node N stops only node N (the controlled
# shutdown of one node, leaving the others running).
set -euo pipefail
: "${KAFKA_CLUSTER_DIR:=${TMPDIR:-/tmp}/ckf-cluster}"
: "${KAFKA_STOP_TIMEOUT:=30}"
dir="$KAFKA_CLUSTER_DIR"
if [[ "${1:-}" == --node ]]; then
  pidfiles=("$dir/node-${2:?--node needs a node number}/kafka.pid")
else
  pidfiles=("$dir"/node-*/kafka.pid)
fi
pids=()
for f in "${pidfiles[@]}"; do
  [[ -f "$f" ]] || continue
  pid="$(cat "$f")"
  if kill -TERM "$pid" 2>/dev/null; then pids+=("$pid"); fi
  rm -f "$f"
done
deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
for pid in "${pids[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS >= deadline )); then
      echo "cluster-down: no clean exit after ${KAFKA_STOP_TIMEOUT}s; killing pid $pid" >&2
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      break
    fi
    sleep 0.2
  done
done
[[ "${1:-}" == --node ]] || rm -f "$dir/bootstrap" "$dir/bootstrap-alt" "$dir/bootstrap-query"
(( ${#pids[@]} == 0 )) || echo "cluster-down: stopped pid(s) ${pids[*]} of $dir" >&2
