#!/usr/bin/env bash
# with-registry.sh CMD...: run CMD with TEST_SCHEMA_REGISTRY_URL pointing at a reachable
# Apicurio Registry (its Confluent API base URL), for the tests that need a real registry.
#
# Uses, in order: TEST_SCHEMA_REGISTRY_URL when set; the registry registry-up.sh left running in
# REGISTRY_RUN_DIR; otherwise starts a fresh one and stops it again when CMD ends (whatever its
# exit code). Exits with CMD's exit code.
#
# The variable is for tests only: processes read their registry from schema_registry.urls
# (CKF_SCHEMA_REGISTRY_URLS), so a test run never points a process at the registry by accident.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${REGISTRY_RUN_DIR:=${TMPDIR:-/tmp}/ckf-registry}"
export REGISTRY_RUN_DIR

started=0
if [[ -z "${TEST_SCHEMA_REGISTRY_URL:-}" ]]; then
  if [[ -f "$REGISTRY_RUN_DIR/registry.pid" ]] && kill -0 "$(cat "$REGISTRY_RUN_DIR/registry.pid")" 2>/dev/null; then
    TEST_SCHEMA_REGISTRY_URL="$(bash "$here/registry-up.sh")"   # already up: prints its URL
    echo "with-registry: using the running registry at $TEST_SCHEMA_REGISTRY_URL" >&2
  else
    TEST_SCHEMA_REGISTRY_URL="$(bash "$here/registry-up.sh")"
    started=1
  fi
else
  echo "with-registry: using TEST_SCHEMA_REGISTRY_URL=$TEST_SCHEMA_REGISTRY_URL" >&2
fi
export TEST_SCHEMA_REGISTRY_URL

stop() { if (( started )); then bash "$here/registry-down.sh" || true; fi; }
trap stop EXIT
trap 'exit 130' INT TERM
"$@"
