#!/usr/bin/env bash
# Memory of an idle epp (release build) against N endpoints, for docs/operations.md: for each
# N, fake vLLM /metrics servers on 127.0.0.1 (tools/fake_metrics.py), an endpoints file with N
# entries, epp on the default config with `--refresh-metrics-interval INTERVAL`; after SETTLE
# seconds prints VmRSS and VmHWM of the epp process and the CPU it used while settled.
# Usage: tools/measure_rss.sh [N...]   (default: 0 100 1000; needs target/release/epp)
set -euo pipefail
cd "$(dirname "$0")/.."
epp=${EPP:-target/release/epp}
interval=${INTERVAL:-1s}
settle=${SETTLE:-20}
base=${BASE:-21000}
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
printf 'endpoints\tinterval\tVmRSS_KiB\tVmHWM_KiB\tcpu_ms_per_s\n'
for n in "${@:-0 100 1000}"; do
  for count in $n; do
    echo "endpoints:" >"$work/endpoints.yaml"
    for i in $(seq 0 $((count - 1))); do
      echo "  - {name: ep-$i, address: 127.0.0.1, port: $((base + i))}" >>"$work/endpoints.yaml"
    done
    [ "$count" = 0 ] && echo "endpoints: []" >"$work/endpoints.yaml"
    fake=""
    if [ "$count" -gt 0 ]; then
      python3 tools/fake_metrics.py "$base" "$count" >"$work/fake.log" 2>&1 &
      fake=$!
      pids+=("$fake")
      for _ in $(seq 100); do grep -q serving "$work/fake.log" && break; sleep 0.1; done
    fi
    RUST_LOG=warn "$epp" --secure-serving=false --bind-address 127.0.0.1 --grpc-port 0 --grpc-health-port 0 \
      --metrics-port 0 --endpoints-file "$work/endpoints.yaml" --refresh-metrics-interval "$interval" \
      >"$work/epp.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    sleep "$((settle / 2))"
    c0=$(cpu_ticks "$pid")
    sleep "$((settle / 2))"
    c1=$(cpu_ticks "$pid")
    cpu=$(( (c1 - c0) * 1000 / ticks / (settle / 2) ))
    printf '%s\t%s\t%s\t%s\t%s\n' "$count" "$interval" "$(kib "$pid" VmRSS)" "$(kib "$pid" VmHWM)" "$cpu"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    if [ -n "$fake" ]; then kill "$fake"; wait "$fake" 2>/dev/null || true; fi
  done
done
