#!/usr/bin/env bash
# with-kafka.sh CMD...: run CMD with KAFKA_BROKERS pointing at a reachable Kafka broker.
#
# Uses, in order: KAFKA_BROKERS when set; the broker kafka-up.sh left running in KAFKA_RUN_DIR;
# otherwise starts a fresh broker and stops it again when CMD ends (whatever its exit code).
# Exits with CMD's exit code.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KAFKA_RUN_DIR:=${TMPDIR:-/tmp}/ckf-kafka}"
export KAFKA_RUN_DIR

started=0
if [[ -z "${KAFKA_BROKERS:-}" ]]; then
  if [[ -f "$KAFKA_RUN_DIR/kafka.pid" ]] && kill -0 "$(cat "$KAFKA_RUN_DIR/kafka.pid")" 2>/dev/null; then
    KAFKA_BROKERS="$(bash "$here/kafka-up.sh")"   # already up: prints its address
    echo "with-kafka: using the running broker at $KAFKA_BROKERS" >&2
  else
    KAFKA_BROKERS="$(bash "$here/kafka-up.sh")"
    started=1
  fi
else
  echo "with-kafka: using KAFKA_BROKERS=$KAFKA_BROKERS" >&2
fi
export KAFKA_BROKERS

stop() { if (( started )); then bash "$here/kafka-down.sh" || true; fi; }
trap stop EXIT
trap 'exit 130' INT TERM
"$@"
