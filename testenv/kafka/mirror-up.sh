#!/usr/bin/env bash
# mirror-up.sh: start MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker,
# what the distribution's connect-mirror-maker.sh runs) between two clusters with aliases a and b,
# from jars resolved from Maven Central by mirror/pom.xml (kept in mirror/libs, apart from the
# broker's), and wait until its herders have started.
#
# It writes $MIRROR_DIR/mm2.properties (unless MIRROR_KEEP_CONFIG=1 and one is there: a restart
# after kill -9 keeps the same settings) and runs MirrorMaker on it; MM2 keeps all its state
# (mirrored positions, connector configs) in its internal topics on the clusters, so a restart
# resumes from the last flushed source offsets. Prints the pid on stdout; writes it to
# $MIRROR_DIR/mm2.pid. The settings and why: the comments of the file it writes, and design §8.
#
# Environment:
#   MIRROR_A_BOOTSTRAP   region a's bootstrap list as MM2 reaches it (required): its local
#                        listener where MM2 runs beside a, the WAN route otherwise
#   MIRROR_B_BOOTSTRAP   region b's bootstrap list as MM2 reaches it (required), likewise
#   MIRROR_CLUSTERS      the target aliases this MirrorMaker runs the flows into (MirrorMaker's
#                        --clusters), space-separated: the alias of the region it runs beside,
#                        so that only its consumers cross the WAN (design §8); empty: every
#                        enabled flow in one process                 (empty)
#   MIRROR_DIR           config, log and pid          (${TMPDIR:-/tmp}/ckf-regions/mm2)
#   MIRROR_POLICY        default: <source alias>.<topic> in the target, both flows a->b and b->a;
#                        identity: the same topic name (IdentityReplicationPolicy), a->b only,
#                        since that policy cannot see cycles and b->a would mirror every record back
#   MIRROR_TOPICS        the topics mirrored, comma-separated Java regexes matched whole
#                        (ckf-lanes.*, ckf-snapshot-index.*, ckf-control.*: the lanes and
#                        their snapshot index one way, the snapshot requests of remote indexers
#                        the other; design §8; without ckf-control.* under the identity policy,
#                        which mirrors a->b only)
#   MIRROR_REFRESH_S     seconds between looks for new matching topics (1: tests create topics
#                        while MM2 runs; MM2's default is 600)
#   MIRROR_FLUSH_MS      offset.flush.interval.ms: how often the mirrored source positions are
#                        committed, and so how much is mirrored again after a kill -9 (1000)
#   MIRROR_HEAP_OPTS     JVM heap                     (-Xms128m -Xmx384m)
#   MIRROR_EXTRA_CONFIG  a file of properties appended to mm2.properties (a key set again wins)
#   MIRROR_START_TIMEOUT seconds to wait for "Kafka MirrorMaker started" (120)
#   MIRROR_OWNER_PID     kill MirrorMaker when this process is gone (unset: never)
#
# With --resolve-only it only resolves the jars and exits.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
libs="$here/mirror/libs"
: "${MIRROR_DIR:=${TMPDIR:-/tmp}/ckf-regions/mm2}"
: "${MIRROR_POLICY:=default}"
if [[ -z "${MIRROR_TOPICS:-}" ]]; then
  # The control topic flows the other way (b->a), which the identity policy leaves off.
  MIRROR_TOPICS="ckf-lanes.*, ckf-snapshot-index.*"
  [[ "$MIRROR_POLICY" == identity ]] || MIRROR_TOPICS+=", ckf-control.*"
fi
: "${MIRROR_REFRESH_S:=1}"
: "${MIRROR_FLUSH_MS:=1000}"
: "${MIRROR_HEAP_OPTS:=-Xms128m -Xmx384m}"
: "${MIRROR_START_TIMEOUT:=120}"
: "${MIRROR_CLUSTERS:=}"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

mm_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/mirror/pom.xml")"
if [[ -d "$libs" ]] && ! [[ -f "$libs/connect-mirror-$mm_version.jar" ]]; then
  echo "mirror-up: $libs holds another MirrorMaker version than $mm_version; resolving again" >&2
  rm -f "$libs"/*.jar
fi
if ! compgen -G "$libs/connect-mirror-*.jar" >/dev/null; then
  command -v mvn >/dev/null || { echo "mirror-up: mvn not found (Maven resolves the MirrorMaker jars)" >&2; exit 1; }
  echo "mirror-up: resolving MirrorMaker $mm_version jars from Maven Central (first run only)..." >&2
  mvn -q -B -f "$here/mirror/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$libs" >&2
fi
if [[ "${1:-}" == --resolve-only ]]; then
  echo "mirror-up: $(ls "$libs" | wc -l) jars in $libs" >&2
  exit 0
fi
: "${MIRROR_A_BOOTSTRAP:?mirror-up: set MIRROR_A_BOOTSTRAP}"
: "${MIRROR_B_BOOTSTRAP:?mirror-up: set MIRROR_B_BOOTSTRAP}"
command -v "$java" >/dev/null || { echo "mirror-up: java not found (JDK 17+ is required)" >&2; exit 1; }

alive() { # pid: running and not a zombie
  kill -0 "$1" 2>/dev/null || return 1
  local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }; [[ "${stat:0:1}" != Z ]]
}
if [[ -f "$MIRROR_DIR/mm2.pid" ]] && alive "$(cat "$MIRROR_DIR/mm2.pid")"; then
  cat "$MIRROR_DIR/mm2.pid"; exit 0
fi
mkdir -p "$MIRROR_DIR"
conf="$MIRROR_DIR/mm2.properties"
if [[ "${MIRROR_KEEP_CONFIG:-0}" != 1 || ! -f "$conf" ]]; then
  case "$MIRROR_POLICY" in
    default)  policy=org.apache.kafka.connect.mirror.DefaultReplicationPolicy; back=true ;;
    identity) policy=org.apache.kafka.connect.mirror.IdentityReplicationPolicy; back=false ;;
    *) echo "mirror-up: MIRROR_POLICY is default or identity, not $MIRROR_POLICY" >&2; exit 1 ;;
  esac
  cat > "$conf" <<PROPS
# MirrorMaker 2, dedicated mode, written by mirror-up.sh. Two regions, one single-node cluster
# each. Every MirrorMaker of the topology reads the same flows; the --clusters it runs with
# (${MIRROR_CLUSTERS:-none: every flow here}) picks the flows into its own region, whose
# Connect herder (group, offsets, configs, status) and producer are then local, and only its
# source consumers reach the other region, over the WAN route.
clusters = a, b
a.bootstrap.servers = $MIRROR_A_BOOTSTRAP
b.bootstrap.servers = $MIRROR_B_BOOTSTRAP

a->b.enabled = true
b->a.enabled = $back
# What crosses the WAN: the lanes and the snapshot index (a remote indexer finds a lane's latest
# snapshot by its identity, sequence and write time there; its offsets are the source's), and the
# control topic (a remote indexer's snapshot request, for the lane's relay).
topics = $MIRROR_TOPICS
groups.exclude = .*
replication.policy.class = $policy

# Single-node clusters: every topic MirrorMaker and its Connect runtime create has one replica.
replication.factor = 1
heartbeats.topic.replication.factor = 1
config.storage.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1

# Latency. The source tasks' records go out at once (Kafka 4's client default linger.ms is 5 ms);
# a fetch returns as soon as one byte is there and waits at most 100 ms otherwise, so an idle
# partition's first record is not held behind a long poll of another.
a.producer.linger.ms = 0
b.producer.linger.ms = 0
a.consumer.fetch.min.bytes = 1
b.consumer.fetch.min.bytes = 1
a.consumer.fetch.max.wait.ms = 100
b.consumer.fetch.max.wait.ms = 100
consumer.poll.timeout.ms = 100
# Only committed records cross: the relays write lanes in transactions, and an aborted delta or
# snapshot mirrored as a plain record would reach the remote indexers as live data. (MirrorMaker's
# consumers read uncommitted by default.)
a.consumer.isolation.level = read_committed
b.consumer.isolation.level = read_committed
# How much is mirrored again after a crash: the source positions are flushed this often.
a.offset.flush.interval.ms = $MIRROR_FLUSH_MS
b.offset.flush.interval.ms = $MIRROR_FLUSH_MS
# New lane topics (and partitions) are picked up within this many seconds.
refresh.topics.interval.seconds = $MIRROR_REFRESH_S
refresh.groups.enabled = false
# No offset translation: the remote indexers find positions by the lane protocol's own sequences
# and the records' timestamps (design §8), so neither checkpoints nor offset syncs are written.
emit.checkpoints.enabled = false
sync.group.offsets.enabled = false
emit.offset-syncs.enabled = false
# Heartbeats once a second: <source>.heartbeats in each target shows the route is alive.
emit.heartbeats.interval.seconds = 1
# The brokers have no authorizer; topic configs (compaction, retention) are copied.
sync.topic.acls.enabled = false
sync.topic.configs.enabled = true
PROPS
  if [[ -n "${MIRROR_EXTRA_CONFIG:-}" ]]; then
    { echo; echo "# Appended from $MIRROR_EXTRA_CONFIG"; cat "$MIRROR_EXTRA_CONFIG"; } >> "$conf"
  fi
fi

clusters=()
for c in $MIRROR_CLUSTERS; do
  [[ "$c" == a || "$c" == b ]] || { echo "mirror-up: MIRROR_CLUSTERS names a and b, not $c" >&2; exit 1; }
done
# After the properties file on the command line: --clusters takes one alias or more, and would
# take the file's name for one.
# shellcheck disable=SC2206
[[ -z "$MIRROR_CLUSTERS" ]] || clusters=(--clusters $MIRROR_CLUSTERS)

log="$MIRROR_DIR/mm2.out"
touch "$log"
base=$(wc -l < "$log")
# shellcheck disable=SC2086
nohup "$java" $MIRROR_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
  -XX:MaxMetaspaceSize=192m -Djava.awt.headless=true -Dlog4j2.configurationFile="$here/log4j2.properties" \
  -cp "$libs/*" org.apache.kafka.connect.mirror.MirrorMaker "$conf" "${clusters[@]}" >> "$log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$MIRROR_DIR/mm2.pid"

if [[ -n "${MIRROR_OWNER_PID:-}" ]]; then
  nohup bash -c '
    owner=$1 pid=$2 conf=$3
    while kill -0 "$owner" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
    if tr "\0" " " < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$conf"; then kill -KILL "$pid" 2>/dev/null; fi' \
    mirror-watchdog "$MIRROR_OWNER_PID" "$pid" "$conf" >/dev/null 2>&1 < /dev/null &
fi

start=$SECONDS
deadline=$((SECONDS + MIRROR_START_TIMEOUT))
until awk -v base="$base" 'NR > base && /Kafka MirrorMaker started/ { found = 1; exit } END { exit !found }' "$log"; do
  if ! alive "$pid" || (( SECONDS >= deadline )); then
    if alive "$pid"; then why="was not started after ${MIRROR_START_TIMEOUT}s"; kill -KILL "$pid" 2>/dev/null || true
    else why="exited during start-up"; fi
    echo "mirror-up: MirrorMaker $why; last lines of $log:" >&2
    tail -n 60 "$log" >&2
    rm -f "$MIRROR_DIR/mm2.pid"
    exit 1
  fi
  sleep 0.2
done
echo "mirror-up: MirrorMaker $mm_version pid $pid started after $((SECONDS - start))s (log: $log)" >&2
echo "$pid"
