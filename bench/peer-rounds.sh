#!/usr/bin/env bash
# bench/peer-rounds.sh: the rounds of make bench-peer, runnable without a toolchain.
#
#   peer-rounds.sh OUT_DIR [ROUNDS] [BENCH_MS] [LABEL]
#
# Runs ROUNDS (5) alternating rounds of the two prebuilt programs next to this script
# (peer-dynamo: the Rust rows on the published crate; peer.test: the Go rows) and writes
# OUT_DIR/machine.txt (the machine's CPU, cores, date, toolchains, load averages) and
# OUT_DIR/rust-<round>.jsonl, OUT_DIR/go-<round>.txt, which tools/peerreport reads.
# make bench-peer builds the programs and calls it; make bench-peer-bundle copies the three
# files into one directory to carry to a machine that has no toolchain.
set -euo pipefail
out=${1:?usage: peer-rounds.sh OUT_DIR [ROUNDS] [BENCH_MS] [LABEL]}
rounds=${2:-5}
bench_ms=${3:-1000}
label=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
rust=${PEER_RUST:-$here/peer-dynamo}
gotest=${PEER_GO:-$here/peer.test}
versions=${PEER_VERSIONS:-$here/versions.txt}
for p in "$rust" "$gotest"; do
  [[ -x $p ]] || { echo "peer-rounds.sh: $p is missing or not executable" >&2; exit 2; }
done
mkdir -p "$out"
rm -f "$out"/rust-*.jsonl "$out"/go-*.txt
{
  [[ -n $label ]] && echo "label: $label"
  echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  # The model name alone does not tell machines apart under a hypervisor ("Intel(R) Xeon(R)
  # Processor" names several generations): family, model and the cache size /proc/cpuinfo
  # reports (the last level) do.
  echo "cpu-id: family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), cache $(grep -m1 '^cache size' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "cores: $(nproc) online ($(grep -c '^processor' /proc/cpuinfo) in /proc/cpuinfo)"
  echo "memory: $(awk '/^MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  [[ -f $versions ]] && cat "$versions"
  echo "loadavg-start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: rust"
  PEER_BENCH_MS=$bench_ms "$rust" > "$out/rust-$r.jsonl"
  echo "round $r/$rounds: go"
  "$gotest" -test.run '^$' -test.bench '^BenchmarkPeer' -test.benchtime "${bench_ms}ms" -test.benchmem > "$out/go-$r.txt"
  echo "loadavg-after-round-$r: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
done
