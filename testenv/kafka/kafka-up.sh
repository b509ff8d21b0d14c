#!/usr/bin/env bash
# kafka-up.sh: start a single-node Apache Kafka broker (KRaft, broker+controller in one JVM) on
# 127.0.0.1 from jars resolved from Maven Central, and wait until it serves requests.
#
# Prints the bootstrap address (host:port) on stdout when ready and writes it to
# $KAFKA_RUN_DIR/bootstrap. If the broker of this run directory is already up, prints its address
# and exits 0. On failure, prints the tail of the broker log to stderr and exits 1.
#
# Environment (all optional):
#   KAFKA_RUN_DIR          data, config, log and pid of this broker  (${TMPDIR:-/tmp}/ckf-kafka)
#   KAFKA_PORT             client port; unset = 9092, or the first free port from 19092 up if busy
#   KAFKA_CONTROLLER_PORT  controller port; unset = a free port after the client port
#   KAFKA_HEAP_OPTS        JVM heap                                    (-Xms256m -Xmx512m)
#   KAFKA_GC_OPTS          JVM garbage collector  (-XX:+UseG1GC -XX:MaxGCPauseMillis=20
#                          -XX:InitiatingHeapOccupancyPercent=35)
#   KAFKA_START_TIMEOUT    seconds to wait for readiness               (90)
#   KAFKA_LIBS             jar folder                                  (testenv/kafka/libs)
#   KAFKA_KEEP_DATA        1: restart on the run directory's existing data (same ports needed)
#   KAFKA_EXTRA_CONFIG     file of properties appended to server.properties (a key set again
#                          there wins); testenv.StartSecuredBroker adds a SASL_SSL listener so
#   KAFKA_SCRAM_USERS      SCRAM credentials created at format time, one a line, each as
#                          kafka-storage format's --add-scram takes it:
#                          SCRAM-SHA-512=[name=alice,password=secret]
#
# With --resolve-only it only resolves the jars (for CI's install step) and exits.
set -euo pipefail
resolve_only=0
[[ "${1:-}" == --resolve-only ]] && resolve_only=1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KAFKA_RUN_DIR:=${TMPDIR:-/tmp}/ckf-kafka}"
: "${KAFKA_LIBS:=$here/libs}"
: "${KAFKA_HEAP_OPTS:=-Xms256m -Xmx512m}"
: "${KAFKA_GC_OPTS:=-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35}"
: "${KAFKA_START_TIMEOUT:=90}"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port_from() {
  local p=$1
  while port_open "$p"; do p=$((p + 1)); done
  echo "$p"
}

# Already running? Then this is a no-op (make kafka-up twice is fine).
if (( ! resolve_only )) && [[ -f "$KAFKA_RUN_DIR/kafka.pid" && -f "$KAFKA_RUN_DIR/bootstrap" ]]; then
  pid="$(cat "$KAFKA_RUN_DIR/kafka.pid")"
  addr="$(cat "$KAFKA_RUN_DIR/bootstrap")"
  if kill -0 "$pid" 2>/dev/null && port_open "${addr##*:}"; then
    echo "$addr"
    exit 0
  fi
fi

command -v "$java" >/dev/null || { echo "kafka-up: java not found (JDK 17+ is required)" >&2; exit 1; }

# 1) Resolve the broker classpath once per Kafka version (pom.xml's kafka.version); Maven caches
#    the jars in ~/.m2 and we copy them to libs/. Jars of another version are removed first.
kafka_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
if [[ -d "$KAFKA_LIBS" ]] && ! [[ -f "$KAFKA_LIBS/kafka_2.13-$kafka_version.jar" ]] && compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null; then
  echo "kafka-up: $KAFKA_LIBS holds another Kafka version than $kafka_version; resolving again" >&2
  rm -f "$KAFKA_LIBS"/*.jar
fi
if ! compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null; then
  command -v mvn >/dev/null || { echo "kafka-up: mvn not found (Maven resolves the Kafka jars)" >&2; exit 1; }
  echo "kafka-up: resolving Kafka jars from Maven Central (first run only)..." >&2
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >&2
fi
if (( resolve_only )); then
  echo "kafka-up: $(ls "$KAFKA_LIBS" | wc -l) jars in $KAFKA_LIBS" >&2
  exit 0
fi
cp="$KAFKA_LIBS/*"
log4j="-Dlog4j2.configurationFile=$here/log4j2.properties"

# 2) Ports: explicit ones are used as given; otherwise pick free ones.
if [[ -z "${KAFKA_PORT:-}" ]]; then
  if port_open 9092; then KAFKA_PORT="$(free_port_from 19092)"; else KAFKA_PORT=9092; fi
fi
if port_open "$KAFKA_PORT"; then
  echo "kafka-up: port $KAFKA_PORT is already in use; set KAFKA_PORT to a free port" >&2
  exit 1
fi
: "${KAFKA_CONTROLLER_PORT:=$(free_port_from $((KAFKA_PORT + 1)))}"

# 3) A fresh data directory (unless KAFKA_KEEP_DATA=1 restarts a broker on its existing data)
#    and a concrete server.properties for this start.
keep=0
if [[ "${KAFKA_KEEP_DATA:-0}" == 1 && -f "$KAFKA_RUN_DIR/data/meta.properties" ]]; then
  keep=1
else
  rm -rf -- "${KAFKA_RUN_DIR:?}"
fi
mkdir -p "$KAFKA_RUN_DIR/data"
sed -e "s#^log.dirs=.*#log.dirs=$KAFKA_RUN_DIR/data#" \
    -e "s#127.0.0.1:9092#127.0.0.1:$KAFKA_PORT#g" \
    -e "s#127.0.0.1:9093#127.0.0.1:$KAFKA_CONTROLLER_PORT#g" \
    "$here/server.properties" > "$KAFKA_RUN_DIR/server.properties"
if [[ -n "${KAFKA_EXTRA_CONFIG:-}" ]]; then
  { echo; echo "# Appended from $KAFKA_EXTRA_CONFIG"; cat "$KAFKA_EXTRA_CONFIG"; } >> "$KAFKA_RUN_DIR/server.properties"
fi
scram=()
while IFS= read -r user; do
  [[ -n "$user" ]] && scram+=(--add-scram "$user")
done <<< "${KAFKA_SCRAM_USERS:-}"

# 4) Format the storage (static quorum: no --standalone), unless restarting on kept data.
if (( ! keep )); then
  cluster_id="$("$java" -Xmx128m $log4j -Dkafka.log.level=WARN -cp "$cp" \
    kafka.tools.StorageTool random-uuid | tail -n1)"
  "$java" -Xmx256m $log4j -Dkafka.log.level=WARN -cp "$cp" kafka.tools.StorageTool format \
    --ignore-formatted -t "$cluster_id" -c "$KAFKA_RUN_DIR/server.properties" ${scram[@]+"${scram[@]}"} \
    > "$KAFKA_RUN_DIR/format.out" 2>&1 || {
      echo "kafka-up: storage format failed:" >&2; tail -n 40 "$KAFKA_RUN_DIR/format.out" >&2; exit 1; }
fi

# 5) Start in the background, detached from this shell's terminal.
start=$SECONDS
# shellcheck disable=SC2086
nohup "$java" $KAFKA_HEAP_OPTS $KAFKA_GC_OPTS -XX:+ExplicitGCInvokesConcurrent \
  -XX:+ExitOnOutOfMemoryError -XX:MaxMetaspaceSize=256m -Djava.awt.headless=true $log4j \
  -cp "$cp" kafka.Kafka "$KAFKA_RUN_DIR/server.properties" \
  >> "$KAFKA_RUN_DIR/kafka.out" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$KAFKA_RUN_DIR/kafka.pid"

# 6) Wait. Kafka 4.1 opens a fixed client port only once the broker is unfenced and serving.
deadline=$((SECONDS + KAFKA_START_TIMEOUT))
until port_open "$KAFKA_PORT"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kafka-up: the broker exited during start-up; last lines of $KAFKA_RUN_DIR/kafka.out:" >&2
    tail -n 80 "$KAFKA_RUN_DIR/kafka.out" >&2
    rm -f "$KAFKA_RUN_DIR/kafka.pid"
    exit 1
  fi
  if (( SECONDS >= deadline )); then
    echo "kafka-up: the broker was not ready after ${KAFKA_START_TIMEOUT}s; last lines of $KAFKA_RUN_DIR/kafka.out:" >&2
    tail -n 80 "$KAFKA_RUN_DIR/kafka.out" >&2
    KAFKA_RUN_DIR="$KAFKA_RUN_DIR" bash "$here/kafka-down.sh" >&2 || true
    exit 1
  fi
  sleep 0.2
done
echo "127.0.0.1:$KAFKA_PORT" > "$KAFKA_RUN_DIR/bootstrap"
echo "kafka-up: broker pid $pid ready on 127.0.0.1:$KAFKA_PORT after $((SECONDS - start))s (log: $KAFKA_RUN_DIR/kafka.out)" >&2
echo "127.0.0.1:$KAFKA_PORT"
