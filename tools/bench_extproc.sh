#!/usr/bin/env bash
# Runs the `epp-tools bench extproc` matrix recorded in docs/benchmarks.md: each series REPEATS
# times (fresh process each), JSON lines appended to OUT/<series>.jsonl, then the plot.
# Usage: tools/bench_extproc.sh [OUT_DIR] (needs `cargo build --release` first).
set -euo pipefail
out=${1:-bench-out}
repeats=${REPEATS:-3}
epp=${EPP:-${CARGO_TARGET_DIR:-target}/release/epp}
mkdir -p "$out"

series() {
  local name=$1
  shift
  for _ in $(seq "$repeats"); do
    echo "# $(uptime)" >>"$out/$name.load"
    RUST_LOG=warn "$epp" bench extproc --json "$@" 2>>"$out/$name.err" | tee -a "$out/$name.jsonl"
  done
}

series full-duplex-10k --body-mode full-duplex --body-size 10k --rates 1000,2000,5000,8000,12000
series buffered-10k --body-mode buffered --body-size 10k --rates 1000,2000,5000,8000,12000
series full-duplex-1k --body-mode full-duplex --body-size 1k --rates 1000,2000,5000,8000,12000
series buffered-1k --body-mode buffered --body-size 1k --rates 1000,2000,5000,8000,12000
series full-duplex-1m --body-mode full-duplex --body-size 1m --rates 50,100,200,400
series buffered-1m --body-mode buffered --body-size 1m --rates 50,100,200,400
series full-duplex-10k-kv100k --body-mode full-duplex --body-size 10k --rates 1000,2000,5000 --kv-events 100000

python3 "$(dirname "$0")/plot_bench.py" "$out/latency-vs-rate.svg" \
  "$out/full-duplex-10k.jsonl" "$out/buffered-10k.jsonl" "$out/full-duplex-1k.jsonl" \
  "$out/buffered-1k.jsonl" "$out/full-duplex-10k-kv100k.jsonl"
