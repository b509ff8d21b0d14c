#!/usr/bin/env bash
# regions-up.sh: two single-node Kafka clusters, regions a and b (KRaft, each from kafka-up.sh, on
# ports of their own and run directories of their own), and a MirrorMaker 2 in dedicated mode
# beside each region (mirror-up.sh) running only the flows into it (MirrorMaker's --clusters with
# the region's alias, design §8): the one in mm2-b runs a->b, reaching a by a's WAN listener and
# b locally; the one in mm2-a runs b->a, reaching b by b's WAN listener and a locally. Each flow's
# Connect herder and producer are so in its target region, and only its source consumers cross
# the WAN. Each region has two client listeners:
#   PLAINTEXT  the region's own clients (its relays, indexers, routers, its MirrorMaker's herder
#              and producer; the tests' clients)
#   WAN        the route from the other region; advertised as REGION_<X>_WAN_ADVERTISED, so that a
#              fault proxy there (testenv.StartRegions) carries every byte the other region's
#              MirrorMaker exchanges with this one, and a test can cut, heal and count the WAN
# Prints "a=<bootstrap> b=<bootstrap>" when all are up; writes each bootstrap to
# $REGIONS_DIR/{a,b}/bootstrap. If both regions of this directory already run, it only starts
# the MirrorMakers that are not running.
#
# Environment (all optional):
#   REGIONS_DIR                 run directories a/, b/, mm2-a/ and mm2-b/  (${TMPDIR:-/tmp}/ckf-regions)
#   REGION_A_PORT, REGION_A_CONTROLLER_PORT, REGION_A_WAN_PORT   (29092, 29093, 29094)
#   REGION_B_PORT, REGION_B_CONTROLLER_PORT, REGION_B_WAN_PORT   (29192, 29193, 29194)
#   REGION_A_WAN_ADVERTISED, REGION_B_WAN_ADVERTISED   host:port each WAN listener advertises (itself)
#   REGION_HEAP_OPTS            each broker's heap                    (-Xms128m -Xmx384m)
#   REGIONS_MIRROR              0: start the two regions only        (1)
#   REGIONS_OWNER_PID           kill both brokers when this process is gone (unset: never)
#   MIRROR_*                    passed to mirror-up.sh (MIRROR_POLICY, MIRROR_TOPICS, ...); under
#                               MIRROR_POLICY=identity (a->b only) mm2-a is not started
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${REGIONS_DIR:=${TMPDIR:-/tmp}/ckf-regions}"
: "${REGION_A_PORT:=29092}" "${REGION_A_CONTROLLER_PORT:=29093}" "${REGION_A_WAN_PORT:=29094}"
: "${REGION_B_PORT:=29192}" "${REGION_B_CONTROLLER_PORT:=29193}" "${REGION_B_WAN_PORT:=29194}"
: "${REGION_A_WAN_ADVERTISED:=127.0.0.1:$REGION_A_WAN_PORT}"
: "${REGION_B_WAN_ADVERTISED:=127.0.0.1:$REGION_B_WAN_PORT}"
: "${REGION_HEAP_OPTS:=-Xms128m -Xmx384m}"
: "${REGIONS_MIRROR:=1}"

region_up() { # alias port controller-port wan-port wan-advertised
  local r=$1 port=$2 ctrl=$3 wan=$4 adv=$5 dir="$REGIONS_DIR/$1"
  mkdir -p "$REGIONS_DIR"
  # kafka-up.sh wipes the run directory at a fresh start; the listener file lives beside it.
  cat > "$REGIONS_DIR/$r-listeners.properties" <<PROPS
# Region $r: the region's own listener, the WAN listener, the controller.
listeners=PLAINTEXT://127.0.0.1:$port,WAN://127.0.0.1:$wan,CONTROLLER://127.0.0.1:$ctrl
advertised.listeners=PLAINTEXT://127.0.0.1:$port,WAN://$adv
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,WAN:PLAINTEXT
PROPS
  KAFKA_RUN_DIR="$dir" KAFKA_PORT="$port" KAFKA_CONTROLLER_PORT="$ctrl" \
    KAFKA_EXTRA_CONFIG="$REGIONS_DIR/$r-listeners.properties" KAFKA_HEAP_OPTS="$REGION_HEAP_OPTS" \
    bash "$here/kafka-up.sh"
}

# The two brokers start side by side: each start is mostly a JVM warming up.
region_up a "$REGION_A_PORT" "$REGION_A_CONTROLLER_PORT" "$REGION_A_WAN_PORT" "$REGION_A_WAN_ADVERTISED" > "$REGIONS_DIR.a.out" 2>&1 &
pa=$!
mkdir -p "$REGIONS_DIR"
region_up b "$REGION_B_PORT" "$REGION_B_CONTROLLER_PORT" "$REGION_B_WAN_PORT" "$REGION_B_WAN_ADVERTISED" > "$REGIONS_DIR.b.out" 2>&1 &
pb=$!
fail=0
wait "$pa" || { echo "regions-up: region a did not start:" >&2; cat "$REGIONS_DIR.a.out" >&2; fail=1; }
wait "$pb" || { echo "regions-up: region b did not start:" >&2; cat "$REGIONS_DIR.b.out" >&2; fail=1; }
rm -f "$REGIONS_DIR.a.out" "$REGIONS_DIR.b.out"
if (( fail )); then REGIONS_DIR="$REGIONS_DIR" bash "$here/regions-down.sh" >&2 || true; exit 1; fi
a="127.0.0.1:$REGION_A_PORT" b="127.0.0.1:$REGION_B_PORT"
# A test that dies without its cleanups must not leave two brokers behind: a watchdog kills them
# (those whose command line names this directory's config) once the owner is gone.
if [[ -n "${REGIONS_OWNER_PID:-}" ]]; then
  nohup bash -c '
    owner=$1 dir=$2
    while kill -0 "$owner" 2>/dev/null && [[ -d "$dir" ]]; do sleep 1; done
    for r in a b; do
      f="$dir/$r/kafka.pid"; [[ -f "$f" ]] || continue
      pid=$(cat "$f")
      if tr "\0" " " < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/$r/server.properties"; then kill -KILL "$pid" 2>/dev/null; fi
    done' regions-watchdog "$REGIONS_OWNER_PID" "$REGIONS_DIR" >/dev/null 2>&1 < /dev/null &
fi
echo "regions-up: region a on $a (WAN $REGION_A_WAN_ADVERTISED), region b on $b (WAN $REGION_B_WAN_ADVERTISED)" >&2

if [[ "$REGIONS_MIRROR" == 1 ]]; then
  # The two MirrorMakers start side by side, as the brokers did.
  MIRROR_DIR="$REGIONS_DIR/mm2-b" MIRROR_CLUSTERS=b MIRROR_A_BOOTSTRAP="$REGION_A_WAN_ADVERTISED" MIRROR_B_BOOTSTRAP="$b" \
    bash "$here/mirror-up.sh" > /dev/null 2> "$REGIONS_DIR.mm2-b.out" &
  pmb=$!
  pma=
  if [[ "${MIRROR_POLICY:-default}" != identity ]]; then
    MIRROR_DIR="$REGIONS_DIR/mm2-a" MIRROR_CLUSTERS=a MIRROR_A_BOOTSTRAP="$a" MIRROR_B_BOOTSTRAP="$REGION_B_WAN_ADVERTISED" \
      bash "$here/mirror-up.sh" > /dev/null 2> "$REGIONS_DIR.mm2-a.out" &
    pma=$!
  fi
  wait "$pmb" || { echo "regions-up: MirrorMaker into b did not start:" >&2; cat "$REGIONS_DIR.mm2-b.out" >&2; fail=1; }
  if [[ -n "$pma" ]]; then
    wait "$pma" || { echo "regions-up: MirrorMaker into a did not start:" >&2; cat "$REGIONS_DIR.mm2-a.out" >&2; fail=1; }
  fi
  (( fail )) || cat "$REGIONS_DIR.mm2-b.out" ${pma:+"$REGIONS_DIR.mm2-a.out"} >&2
  rm -f "$REGIONS_DIR.mm2-a.out" "$REGIONS_DIR.mm2-b.out"
  if (( fail )); then REGIONS_DIR="$REGIONS_DIR" bash "$here/regions-down.sh" >&2 || true; exit 1; fi
fi
echo "a=$a b=$b"
