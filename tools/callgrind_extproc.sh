#!/usr/bin/env bash
# Instructions per ext_proc request (valgrind --tool=callgrind), for epp and for the no-op floor
# server (`epp-tools bench floor-server`), each in its own process under callgrind and loaded
# over loopback by `epp-tools bench extproc --target` (not under valgrind). Per body mode and
# size, two runs of the same length at LOW and HIGH requests/s; the per-request figure is
# (Ir(HIGH) - Ir(LOW)) / (requests(HIGH) - requests(LOW)), so start-up, shutdown and the fixed
# idle work (scrapes, timers) cancel out. Instruction counts are repeatable on a loaded machine.
# Usage: tools/callgrind_extproc.sh [SERVER...]   SERVER: epp | floor (default: both)
# Env: EPP (target/release/epp), TOOLS (target/release/epp-tools), SIZES (1k 10k 100k),
#      MODES (full-duplex buffered), SHAPE (body shape: plain, or turns for a multi-turn chat
#      with escapes), LOW/HIGH (rates, default 10/30), SECS (8), OUT (dir).
set -euo pipefail
cd "$(dirname "$0")/.."
epp=${EPP:-target/release/epp}
tools=${TOOLS:-target/release/epp-tools}
sizes=${SIZES:-1k 10k 100k}
modes=${MODES:-full-duplex buffered}
shape=${SHAPE:-plain}
low=${LOW:-10}
high=${HIGH:-30}
secs=${SECS:-8}
out=${OUT:-$(mktemp -d)}
port=${PORT:-19102}
base=${BASE:-19200}
mkdir -p "$out"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# Eight fake vLLM pods for epp (scraped every second: the request path is what is measured).
# shellcheck source=tools/fake_pods.sh
. tools/fake_pods.sh
start_fake_pods "$out" "$base" 8

start_server() { # server, callgrind output file
  case $1 in
    epp)
      RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$2" "$epp" --secure-serving=false \
        --bind-address 127.0.0.1 --grpc-port "$port" --grpc-health-port 0 --metrics-port 0 \
        --endpoints-file "$out/endpoints.yaml" --refresh-metrics-interval 1s --drain-grace 0s >"$2.log" 2>&1 &
      ;;
    floor)
      valgrind --tool=callgrind --callgrind-out-file="$2" "$tools" bench floor-server \
        --listen "127.0.0.1:$port" >"$2.log" 2>&1 &
      ;;
  esac
  server=$!
  # Ready when a one-request run succeeds (bounded: 120 tries, the start-up under valgrind is slow).
  for _ in $(seq 120); do
    if "$tools" bench extproc --target "127.0.0.1:$port" --rate 1 --duration 1s --warmup 0s --json \
      >/dev/null 2>&1; then
      return
    fi
    sleep 1
  done
  echo "server $1 did not answer" >&2
  exit 1
}

total_ir() { awk '/^summary:|^totals:/ {print $2; exit}' "$1"; }

printf 'server\tmode\tsize\tIr_per_request\trequests_low\trequests_high\n'
for server in "${@:-floor epp}"; do
  for s in $server; do
    for mode in $modes; do
      for size in $sizes; do
        declare -A ir=() ok=()
        for rate in $low $high; do
          file="$out/$s-$mode-$size-$rate.cg"
          start_server "$s" "$file"
          line=$("$tools" bench extproc --target "127.0.0.1:$port" --rate "$rate" --duration "${secs}s" \
            --warmup 0s --body-mode "$mode" --body-size "$size" --body-shape "$shape" --timeout 30s --json)
          kill -TERM "$server"
          wait "$server" || true
          ir[$rate]=$(total_ir "$file")
          ok[$rate]=$(echo "$line" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ok"] + 1)')
        done
        # +1 each: the readiness probe's request.
        per=$(((ir[$high] - ir[$low]) / (ok[$high] - ok[$low])))
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$mode" "$size" "$per" "${ok[$low]}" "${ok[$high]}"
      done
    done
  done
done
