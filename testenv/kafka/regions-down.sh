#!/usr/bin/env bash
# regions-down.sh: stop what regions-up.sh started: the MirrorMakers first (mirror-down.sh, side
# by side), then the brokers of regions a and b (kafka-down.sh, side by side). Exits 0 when
# nothing was running.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${REGIONS_DIR:=${TMPDIR:-/tmp}/ckf-regions}"
MIRROR_DIR="$REGIONS_DIR/mm2-a" bash "$here/mirror-down.sh" & ma=$!
MIRROR_DIR="$REGIONS_DIR/mm2-b" bash "$here/mirror-down.sh" & mb=$!
wait "$ma"; wait "$mb"
KAFKA_RUN_DIR="$REGIONS_DIR/a" bash "$here/kafka-down.sh" & pa=$!
KAFKA_RUN_DIR="$REGIONS_DIR/b" bash "$here/kafka-down.sh" & pb=$!
wait "$pa"; wait "$pb"
