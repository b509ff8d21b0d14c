#!/usr/bin/env bash
# mirror-down.sh: stop the MirrorMaker mirror-up.sh started (SIGTERM: its tasks flush their
# source positions; after MIRROR_STOP_TIMEOUT seconds, 30, SIGKILL). Exits 0 when none runs.
set -euo pipefail
: "${MIRROR_DIR:=${TMPDIR:-/tmp}/ckf-regions/mm2}"
: "${MIRROR_STOP_TIMEOUT:=30}"
pidf="$MIRROR_DIR/mm2.pid"
[[ -f "$pidf" ]] || exit 0
pid="$(cat "$pidf")"
rm -f "$pidf"
kill -TERM "$pid" 2>/dev/null || exit 0
deadline=$((SECONDS + MIRROR_STOP_TIMEOUT))
while kill -0 "$pid" 2>/dev/null; do
  if (( SECONDS >= deadline )); then
    echo "mirror-down: no clean exit after ${MIRROR_STOP_TIMEOUT}s; killing pid $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    break
  fi
  sleep 0.2
done
echo "mirror-down: MirrorMaker pid $pid stopped" >&2
