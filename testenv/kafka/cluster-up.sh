#!/usr/bin/env bash
# cluster-up.sh: start a three-node Apache Kafka cluster (KRaft; each node is broker and controller
# in one JVM, a static quorum of the three) on 127.0.0.1, from the jars kafka-up.sh resolves, and
# wait until every node serves requests. Each node has six listeners:
#   CLIENT      for clients; advertised as KAFKA_CLUSTER_CLIENT_ADVERTISED (default: itself)
#   ALT         a second client listener with its own advertised address, so that two groups of
#               processes can reach the brokers by separate routes (a fault proxy on one route)
#   QUERY       a third client listener with its own advertised address, for the query path
#               (kafka.query_brokers: the indexers' query service and the routers)
#   REPLICATION replication and the other traffic between the nodes (inter.broker.listener.name:
#               follower fetches, transaction markers); advertised as
#               KAFKA_CLUSTER_REPLICATION_ADVERTISED, so a fault proxy can cut a node off from
#               its peers while its clients still reach it
#   BROKER      a client listener no proxy ever sits in front of (the tests' own clients)
#   CONTROLLER  the KRaft quorum
# A client sees the advertised addresses of the listener it bootstrapped on, so a client seeded
# with proxy addresses stays behind the proxies.
#
# Prints the CLIENT bootstrap list on stdout when ready and writes it to $KAFKA_CLUSTER_DIR/bootstrap
# (the ALT list to bootstrap-alt, the QUERY list to bootstrap-query). If the cluster of this directory is already up, prints its
# list and exits 0. On failure prints the tail of the node logs to stderr and exits 1.
#
#   cluster-up.sh            format fresh data for every node and start them all
#   cluster-up.sh --node N   start node N (1-based) again on its existing data and config, after a
#                            kill or a stop (the other nodes keep running)
#
# Environment (all optional; lists are comma-separated, one entry per node):
#   KAFKA_CLUSTER_DIR                data, configs, logs and pids   (${TMPDIR:-/tmp}/ckf-cluster)
#   KAFKA_CLUSTER_CLIENT_PORTS       CLIENT ports                   (19092,19093,19094)
#   KAFKA_CLUSTER_CONTROLLER_PORTS   CONTROLLER ports               (19192,19193,19194)
#   KAFKA_CLUSTER_BROKER_PORTS       BROKER (direct) ports          (19292,19293,19294)
#   KAFKA_CLUSTER_REPLICATION_PORTS  REPLICATION ports              (19592,19593,19594)
#   KAFKA_CLUSTER_ALT_PORTS          ALT ports                      (19392,19393,19394)
#   KAFKA_CLUSTER_QUERY_PORTS        QUERY ports                    (19492,19493,19494)
#   KAFKA_CLUSTER_CLIENT_ADVERTISED  host:port each CLIENT listener advertises (itself)
#   KAFKA_CLUSTER_ALT_ADVERTISED     host:port each ALT listener advertises    (itself)
#   KAFKA_CLUSTER_QUERY_ADVERTISED   host:port each QUERY listener advertises  (itself)
#   KAFKA_CLUSTER_REPLICATION_ADVERTISED  host:port each REPLICATION listener advertises (itself)
#   KAFKA_CLUSTER_HEAP_OPTS          JVM heap of each node          (-Xms128m -Xmx384m)
#   KAFKA_CLUSTER_JVM_OPTS           other JVM options              (-XX:TieredStopAtLevel=1
#                                    -XX:CICompilerCount=1: the quick compiler only, one thread:
#                                    three JVMs start on two cores without the optimising
#                                    compiler's CPU, at some cost in throughput a test never needs)
#   KAFKA_CLUSTER_REPLICA_LAG_MS     replica.lag.time.max.ms        (10000)
#   KAFKA_START_TIMEOUT              seconds to wait for readiness  (120)
#   KAFKA_CLUSTER_OWNER_PID          kill the nodes when this process is gone (unset: never)
#   KAFKA_LIBS                       jar folder                     (testenv/kafka/libs)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
only=0
if [[ "${1:-}" == --node ]]; then only="${2:?--node needs a node number}"; fi

: "${KAFKA_CLUSTER_DIR:=${TMPDIR:-/tmp}/ckf-cluster}"
: "${KAFKA_LIBS:=$here/libs}"
: "${KAFKA_CLUSTER_CLIENT_PORTS:=19092,19093,19094}"
: "${KAFKA_CLUSTER_CONTROLLER_PORTS:=19192,19193,19194}"
: "${KAFKA_CLUSTER_BROKER_PORTS:=19292,19293,19294}"
: "${KAFKA_CLUSTER_REPLICATION_PORTS:=19592,19593,19594}"
: "${KAFKA_CLUSTER_ALT_PORTS:=19392,19393,19394}"
: "${KAFKA_CLUSTER_QUERY_PORTS:=19492,19493,19494}"
: "${KAFKA_CLUSTER_HEAP_OPTS:=-Xms128m -Xmx384m}"
: "${KAFKA_CLUSTER_JVM_OPTS:=-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1}"
: "${KAFKA_CLUSTER_REPLICA_LAG_MS:=10000}"
: "${KAFKA_START_TIMEOUT:=120}"
export KAFKA_LIBS
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
dir="$KAFKA_CLUSTER_DIR"

IFS=, read -r -a client <<<"$KAFKA_CLUSTER_CLIENT_PORTS"
IFS=, read -r -a ctrl <<<"$KAFKA_CLUSTER_CONTROLLER_PORTS"
IFS=, read -r -a direct <<<"$KAFKA_CLUSTER_BROKER_PORTS"
IFS=, read -r -a repl <<<"$KAFKA_CLUSTER_REPLICATION_PORTS"
IFS=, read -r -a alt <<<"$KAFKA_CLUSTER_ALT_PORTS"
IFS=, read -r -a query <<<"$KAFKA_CLUSTER_QUERY_PORTS"
n=${#client[@]}
for l in ctrl direct repl alt query; do
  declare -n arr=$l
  (( ${#arr[@]} == n )) || { echo "cluster-up: every port list needs $n entries" >&2; exit 1; }
done
if [[ -n "${KAFKA_CLUSTER_CLIENT_ADVERTISED:-}" ]]; then IFS=, read -r -a client_adv <<<"$KAFKA_CLUSTER_CLIENT_ADVERTISED"
else client_adv=(); for p in "${client[@]}"; do client_adv+=("127.0.0.1:$p"); done; fi
if [[ -n "${KAFKA_CLUSTER_ALT_ADVERTISED:-}" ]]; then IFS=, read -r -a alt_adv <<<"$KAFKA_CLUSTER_ALT_ADVERTISED"
else alt_adv=(); for p in "${alt[@]}"; do alt_adv+=("127.0.0.1:$p"); done; fi
if [[ -n "${KAFKA_CLUSTER_QUERY_ADVERTISED:-}" ]]; then IFS=, read -r -a query_adv <<<"$KAFKA_CLUSTER_QUERY_ADVERTISED"
else query_adv=(); for p in "${query[@]}"; do query_adv+=("127.0.0.1:$p"); done; fi
if [[ -n "${KAFKA_CLUSTER_REPLICATION_ADVERTISED:-}" ]]; then IFS=, read -r -a repl_adv <<<"$KAFKA_CLUSTER_REPLICATION_ADVERTISED"
else repl_adv=(); for p in "${repl[@]}"; do repl_adv+=("127.0.0.1:$p"); done; fi
(( ${#client_adv[@]} == n && ${#alt_adv[@]} == n && ${#query_adv[@]} == n && ${#repl_adv[@]} == n )) || { echo "cluster-up: every advertised list needs $n entries" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A killed node stays a zombie until its parent reaps it; kill -0 still succeeds on a zombie, so
# its state letter (after the parenthesised command name in /proc/PID/stat) is checked too.
alive() {
  [[ -f "$dir/node-$1/kafka.pid" ]] || return 1
  local pid stat
  pid=$(cat "$dir/node-$1/kafka.pid")
  kill -0 "$pid" 2>/dev/null || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat:0:1}" != Z ]]
}
join() { local IFS=,; echo "$*"; }

if (( only == 0 )); then
  # Already running? Then this is a no-op (make cluster-up twice is fine).
  up=1
  for ((i = 1; i <= n; i++)); do alive "$i" && port_open "${client[i-1]}" || up=0; done
  if (( up )) && [[ -f "$dir/bootstrap" ]]; then cat "$dir/bootstrap"; exit 0; fi
  for ((i = 1; i <= n; i++)); do
    if alive "$i"; then echo "cluster-up: node $i of $dir runs but the cluster is not serving; run cluster-down.sh first" >&2; exit 1; fi
  done
  for p in "${client[@]}" "${ctrl[@]}" "${direct[@]}" "${repl[@]}" "${alt[@]}" "${query[@]}"; do
    if port_open "$p"; then echo "cluster-up: port $p is already in use" >&2; exit 1; fi
  done
fi

command -v "$java" >/dev/null || { echo "cluster-up: java not found (JDK 17+ is required)" >&2; exit 1; }
bash "$here/kafka-up.sh" --resolve-only >/dev/null 2>&1 || bash "$here/kafka-up.sh" --resolve-only >&2
cp="$KAFKA_LIBS/*"
log4j="-Dlog4j2.configurationFile=$here/log4j2.properties"

voters=""
for ((i = 1; i <= n; i++)); do voters+="${voters:+,}$i@127.0.0.1:${ctrl[i-1]}"; done

write_config() { # node
  local i=$1 rf=$(( n < 3 ? n : 3 ))
  local misr=$(( rf > 1 ? rf - 1 : 1 ))
  cat > "$dir/node-$i/server.properties" <<PROPS
# Node $i of a $n-node test cluster written by cluster-up.sh.
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=REPLICATION://127.0.0.1:${repl[i-1]},BROKER://127.0.0.1:${direct[i-1]},CLIENT://127.0.0.1:${client[i-1]},ALT://127.0.0.1:${alt[i-1]},QUERY://127.0.0.1:${query[i-1]},CONTROLLER://127.0.0.1:${ctrl[i-1]}
advertised.listeners=REPLICATION://${repl_adv[i-1]},BROKER://127.0.0.1:${direct[i-1]},CLIENT://${client_adv[i-1]},ALT://${alt_adv[i-1]},QUERY://${query_adv[i-1]}
controller.listener.names=CONTROLLER
inter.broker.listener.name=REPLICATION
listener.security.protocol.map=REPLICATION:PLAINTEXT,BROKER:PLAINTEXT,CLIENT:PLAINTEXT,ALT:PLAINTEXT,QUERY:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/node-$i/data

# Topics the processes create choose their own replication (kafka.topic_replication_factor and
# kafka.topic_min_insync_replicas); the broker defaults stay those of one node, so a topic that
# gets 3 replicas got them from the process. Kafka's internal topics are replicated everywhere.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$misr
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$misr
group.initial.rebalance.delay.ms=0
# A follower that stops fetching leaves the ISR after this long (Kafka's default is 30 s).
replica.lag.time.max.ms=$KAFKA_CLUSTER_REPLICA_LAG_MS
# Leaders move back to the preferred replica after a node returns.
auto.leader.rebalance.enable=true
leader.imbalance.check.interval.seconds=30

# Small box (2 cores shared by three nodes): few threads, a small cleaner buffer.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.dedupe.buffer.size=2097152
log.retention.check.interval.ms=5000
PROPS
}

start_node() { # node
  local i=$1
  # shellcheck disable=SC2086
  nohup "$java" $KAFKA_CLUSTER_HEAP_OPTS $KAFKA_CLUSTER_JVM_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:+ExitOnOutOfMemoryError -XX:MaxMetaspaceSize=192m -XX:ReservedCodeCacheSize=64m \
    -Djava.awt.headless=true $log4j -cp "$cp" kafka.Kafka "$dir/node-$i/server.properties" \
    >> "$dir/node-$i/kafka.out" 2>&1 < /dev/null &
  echo $! > "$dir/node-$i/kafka.pid"
}

nodes=()
if (( only )); then
  (( only >= 1 && only <= n )) || { echo "cluster-up: node $only is not in 1..$n" >&2; exit 1; }
  [[ -f "$dir/node-$only/data/meta.properties" ]] || { echo "cluster-up: node $only has no data in $dir; start the cluster first" >&2; exit 1; }
  if alive "$only"; then echo "cluster-up: node $only is already running" >&2; exit 1; fi
  nodes=("$only")
else
  rm -rf -- "${dir:?}"
  mkdir -p "$dir"
  # A cluster id is 16 random bytes in URL-safe base64 without padding (what StorageTool
  # random-uuid prints; one JVM start less), not starting with '-' so no tool takes it for a flag.
  cluster_id=-
  until [[ "$cluster_id" != -* ]]; do cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"; done
  # The nodes are formatted in parallel: each format is a JVM start.
  fmt_pids=()
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$dir/node-$i/data"
    write_config "$i"
    # shellcheck disable=SC2086
    "$java" -Xmx256m $KAFKA_CLUSTER_JVM_OPTS $log4j -Dkafka.log.level=WARN -cp "$cp" kafka.tools.StorageTool format \
      --ignore-formatted -t "$cluster_id" -c "$dir/node-$i/server.properties" \
      > "$dir/node-$i/format.out" 2>&1 &
    fmt_pids+=($!)
    nodes+=("$i")
  done
  for i in "${nodes[@]}"; do
    wait "${fmt_pids[i-1]}" || {
      echo "cluster-up: storage format of node $i failed:" >&2; tail -n 40 "$dir/node-$i/format.out" >&2; exit 1; }
  done
fi

start=$SECONDS
# The lines each node's log has before this start: readiness is judged on the lines after them.
declare -A logbase
for i in "${nodes[@]}"; do
  logbase[$i]=$(wc -l 2>/dev/null < "$dir/node-$i/kafka.out" || echo 0) # a first start has no log yet
  start_node "$i"
done

# A test that dies without its cleanups (go test's -timeout panic) must not leave three JVMs
# behind: with KAFKA_CLUSTER_OWNER_PID set, a watchdog kills the nodes (those whose command line
# names this directory's config, so a recycled pid is never hit) once that process is gone, and
# ends by itself when the directory is removed.
if [[ -n "${KAFKA_CLUSTER_OWNER_PID:-}" && ! -f "$dir/watchdog.pid" ]]; then
  nohup bash -c '
    owner=$1 dir=$2
    while kill -0 "$owner" 2>/dev/null && [[ -d "$dir" ]]; do sleep 1; done
    for f in "$dir"/node-*/kafka.pid; do
      [[ -f "$f" ]] || continue
      pid=$(cat "$f")
      if tr "\0" " " < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$(dirname "$f")/server.properties"; then
        kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
      fi
    done
    rm -f "$dir/watchdog.pid"' cluster-watchdog "$KAFKA_CLUSTER_OWNER_PID" "$dir" >/dev/null 2>&1 < /dev/null &
  echo $! > "$dir/watchdog.pid"
fi

# Kafka 4.1 opens a client listener only once the node is unfenced and serving, and logs "Kafka
# Server started" once every listener is bound. The port alone is not proof: a port that another
# process took after the check above answers too, while the node, unable to bind it, exits.
started() { # node
  alive "$1" && port_open "${client[$1-1]}" &&
    awk -v base="${logbase[$1]}" 'NR > base && /Kafka Server started/ { found = 1; exit } END { exit !found }' "$dir/node-$1/kafka.out"
}
deadline=$((SECONDS + KAFKA_START_TIMEOUT))
for i in "${nodes[@]}"; do
  until started "$i"; do
    if ! alive "$i" || (( SECONDS >= deadline )); then
      if alive "$i"; then why="was not ready after ${KAFKA_START_TIMEOUT}s"; else why="exited during start-up"; fi
      echo "cluster-up: node $i $why; last lines of $dir/node-$i/kafka.out:" >&2
      tail -n 60 "$dir/node-$i/kafka.out" >&2
      (( only )) || KAFKA_CLUSTER_DIR="$dir" bash "$here/cluster-down.sh" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
done
join "${client_adv[@]}" > "$dir/bootstrap"
join "${alt_adv[@]}" > "$dir/bootstrap-alt"
join "${query_adv[@]}" > "$dir/bootstrap-query"
echo "cluster-up: node(s) ${nodes[*]} of $dir ready after $((SECONDS - start))s" >&2
cat "$dir/bootstrap"
