#!/usr/bin/env bash
# registry-up.sh: start Apicurio Registry (the Quarkus server distribution from Maven Central) on
# 127.0.0.1 with its default in-memory storage (H2 in memory: nothing is written to disk and
# every start is empty), and wait until its Confluent-compatible API answers.
#
# Prints the Confluent API base URL (http://127.0.0.1:PORT/apis/ccompat/v7) on stdout when ready
# and writes it to $REGISTRY_RUN_DIR/url. If the registry of this run directory is already up,
# prints its URL and exits 0. On failure, prints the tail of the registry log to stderr and exits 1.
#
# Apicurio 3.x is compiled for Java 21. The script runs the first Java of 21 or later among
# $REGISTRY_JAVA_HOME, $JAVA_HOME, `java` on the PATH and /usr/lib/jvm/*.
#
# Environment (all optional):
#   REGISTRY_RUN_DIR        log, pid and URL of this registry     (${TMPDIR:-/tmp}/ckf-registry)
#   REGISTRY_PORT           HTTP port; unset = 8181, or the first free port from 18181 up if busy
#   REGISTRY_HEAP_OPTS      JVM heap                                       (-Xms64m -Xmx384m)
#   REGISTRY_START_TIMEOUT  seconds to wait for readiness                  (120)
#   REGISTRY_DIST           where the archive is unpacked                  (testenv/registry/dist)
#   REGISTRY_JAVA_HOME      a Java 21+ installation to use first
#
# With --resolve-only it only fetches and unpacks the distribution (for CI's install step) and exits.
set -euo pipefail
resolve_only=0
[[ "${1:-}" == --resolve-only ]] && resolve_only=1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${REGISTRY_RUN_DIR:=${TMPDIR:-/tmp}/ckf-registry}"
: "${REGISTRY_DIST:=$here/dist}"
: "${REGISTRY_HEAP_OPTS:=-Xms64m -Xmx384m}"
: "${REGISTRY_START_TIMEOUT:=120}"
version="$(sed -n 's#.*<apicurio.version>\(.*\)</apicurio.version>.*#\1#p' "$here/pom.xml")"
app="$REGISTRY_DIST/apicurio-registry-app-$version"
api=/apis/ccompat/v7

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port_from() {
  local p=$1
  while port_open "$p"; do p=$((p + 1)); done
  echo "$p"
}
# http_ok PORT PATH: true when GET PATH answers 200. Plain bash, so that curl is not required.
http_ok() {
  local status
  status="$(exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1" &&
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3 && head -n 1 <&3)" || return 1
  [[ "$status" == "HTTP/1."[01]" 200"* ]]
}

# Already running? Then this is a no-op (make registry-up twice is fine).
if (( ! resolve_only )) && [[ -f "$REGISTRY_RUN_DIR/registry.pid" && -f "$REGISTRY_RUN_DIR/url" ]]; then
  pid="$(cat "$REGISTRY_RUN_DIR/registry.pid")"
  url="$(cat "$REGISTRY_RUN_DIR/url")"
  p="${url#http://127.0.0.1:}"; p="${p%%/*}"
  if kill -0 "$pid" 2>/dev/null && http_ok "$p" "$api/subjects"; then
    echo "$url"
    exit 0
  fi
fi

# 1) Fetch and unpack the distribution once; Maven caches the archive in ~/.m2.
if [[ ! -f "$app/quarkus-run.jar" ]]; then
  command -v mvn >/dev/null || { echo "registry-up: mvn not found (Maven fetches Apicurio Registry)" >&2; exit 1; }
  command -v tar >/dev/null || { echo "registry-up: tar not found" >&2; exit 1; }
  echo "registry-up: fetching Apicurio Registry $version from Maven Central (first run only)..." >&2
  tmp="$REGISTRY_DIST/.download"
  rm -rf -- "$tmp"
  mkdir -p "$tmp/unpacked"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeTypes=tar.gz -DoutputDirectory="$tmp" >&2
  tar -xzf "$tmp/apicurio-registry-app-$version-all.tar.gz" -C "$tmp/unpacked"
  [[ -f "$tmp/unpacked/quarkus-run.jar" ]] || { echo "registry-up: the archive holds no quarkus-run.jar" >&2; exit 1; }
  rm -rf -- "$app"
  mv "$tmp/unpacked" "$app"
  rm -rf -- "$tmp"
fi
if (( resolve_only )); then
  echo "registry-up: Apicurio Registry $version in $app" >&2
  exit 0
fi

# 2) A Java of 21 or later.
java_major() { "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' | cut -d. -f1; }
java=""
for cand in ${REGISTRY_JAVA_HOME:+"$REGISTRY_JAVA_HOME/bin/java"} ${JAVA_HOME:+"$JAVA_HOME/bin/java"} \
    "$(command -v java || true)" /usr/lib/jvm/*/bin/java; do
  [[ -n "$cand" && -x "$cand" ]] || continue
  major="$(java_major "$cand" || true)"
  if [[ "$major" =~ ^[0-9]+$ ]] && (( major >= 21 )); then java="$cand"; break; fi
done
[[ -n "$java" ]] || { echo "registry-up: no Java 21 or later found (Apicurio Registry $version needs one); set REGISTRY_JAVA_HOME" >&2; exit 1; }

# 3) Port: an explicit one is used as given; otherwise 8181, or a free one from 18181 up.
if [[ -z "${REGISTRY_PORT:-}" ]]; then
  if port_open 8181; then REGISTRY_PORT="$(free_port_from 18181)"; else REGISTRY_PORT=8181; fi
fi
if port_open "$REGISTRY_PORT"; then
  echo "registry-up: port $REGISTRY_PORT is already in use; set REGISTRY_PORT to a free port" >&2
  exit 1
fi

# 4) Start in the background from the run directory, detached from this shell's terminal. The
#    management interface (health and metrics, on 0.0.0.0:9000 by default; it cannot be turned
#    off at run time) moves to loopback and a free port, as 9000 may belong to someone else;
#    readiness is read from the API itself. The access log (one line per request) is off, so
#    that the log shows start-up and errors.
mgmt_port="$(free_port_from $((REGISTRY_PORT + 1)))"
rm -rf -- "${REGISTRY_RUN_DIR:?}"
mkdir -p "$REGISTRY_RUN_DIR"
start=$SECONDS
# shellcheck disable=SC2086
(cd "$REGISTRY_RUN_DIR" && exec nohup "$java" $REGISTRY_HEAP_OPTS -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
  -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
  -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mgmt_port" \
  -Dquarkus.http.access-log.enabled=false \
  -jar "$app/quarkus-run.jar" >> "$REGISTRY_RUN_DIR/registry.out" 2>&1 < /dev/null) &
pid=$!
echo "$pid" > "$REGISTRY_RUN_DIR/registry.pid"

# 5) Wait until the Confluent API answers.
url="http://127.0.0.1:$REGISTRY_PORT$api"
deadline=$((SECONDS + REGISTRY_START_TIMEOUT))
until http_ok "$REGISTRY_PORT" "$api/subjects"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "registry-up: the registry exited during start-up; last lines of $REGISTRY_RUN_DIR/registry.out:" >&2
    tail -n 60 "$REGISTRY_RUN_DIR/registry.out" >&2
    rm -f "$REGISTRY_RUN_DIR/registry.pid"
    exit 1
  fi
  if (( SECONDS >= deadline )); then
    echo "registry-up: the registry was not ready after ${REGISTRY_START_TIMEOUT}s; last lines of $REGISTRY_RUN_DIR/registry.out:" >&2
    tail -n 60 "$REGISTRY_RUN_DIR/registry.out" >&2
    REGISTRY_RUN_DIR="$REGISTRY_RUN_DIR" bash "$here/registry-down.sh" >&2 || true
    exit 1
  fi
  sleep 0.2
done
echo "$url" > "$REGISTRY_RUN_DIR/url"
echo "registry-up: Apicurio Registry $version pid $pid ready at $url after $((SECONDS - start))s (log: $REGISTRY_RUN_DIR/registry.out)" >&2
echo "$url"
