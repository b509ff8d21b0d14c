#!/usr/bin/env bash
# registry-down.sh: stop the registry started by registry-up.sh. SIGTERM lets Quarkus shut down;
# after REGISTRY_STOP_TIMEOUT seconds (20) the JVM is killed. Its storage is in memory, so nothing
# is left to clean up but the run directory's pid and URL files. Exits 0 when nothing was running.
set -euo pipefail
: "${REGISTRY_RUN_DIR:=${TMPDIR:-/tmp}/ckf-registry}"
: "${REGISTRY_STOP_TIMEOUT:=20}"
pidf="$REGISTRY_RUN_DIR/registry.pid"
[[ -f "$pidf" ]] || exit 0
pid="$(cat "$pidf")"
if ! kill -TERM "$pid" 2>/dev/null; then
  rm -f "$pidf" "$REGISTRY_RUN_DIR/url"
  exit 0
fi
deadline=$((SECONDS + REGISTRY_STOP_TIMEOUT))
while kill -0 "$pid" 2>/dev/null; do
  if (( SECONDS >= deadline )); then
    echo "registry-down: no clean exit after ${REGISTRY_STOP_TIMEOUT}s; killing pid $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    break
  fi
  sleep 0.2
done
rm -f "$pidf" "$REGISTRY_RUN_DIR/url"
echo "registry-down: registry pid $pid stopped" >&2
