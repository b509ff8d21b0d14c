#!/usr/bin/env bash
# kafka-down.sh: stop the broker started by kafka-up.sh. SIGTERM runs Kafka's controlled shutdown;
# after KAFKA_STOP_TIMEOUT seconds (30) the JVM is killed. Leaves no process behind; exits 0 when
# nothing was running.
set -euo pipefail
: "${KAFKA_RUN_DIR:=${TMPDIR:-/tmp}/ckf-kafka}"
: "${KAFKA_STOP_TIMEOUT:=30}"
pidf="$KAFKA_RUN_DIR/kafka.pid"
[[ -f "$pidf" ]] || exit 0
pid="$(cat "$pidf")"
if ! kill -TERM "$pid" 2>/dev/null; then
  rm -f "$pidf" "$KAFKA_RUN_DIR/bootstrap"
  exit 0
fi
deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
while kill -0 "$pid" 2>/dev/null; do
  if (( SECONDS >= deadline )); then
    echo "kafka-down: no clean exit after ${KAFKA_STOP_TIMEOUT}s; killing pid $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    break
  fi
  sleep 0.2
done
rm -f "$pidf" "$KAFKA_RUN_DIR/bootstrap"
echo "kafka-down: broker pid $pid stopped" >&2
