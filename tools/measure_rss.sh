#!/usr/bin/env bash
# Memory of an idle epp (release build) against N endpoints, for docs/operations.md: for each
# N, fake vLLM /metrics servers on 127.0.0.1 (tools/fake_metrics.py), an endpoints file with N
# entries, epp on the default config with `--refresh-metrics-interval INTERVAL`; after SETTLE
# seconds prints VmRSS and VmHWM of the epp process, the CPU it used while settled, the scrapes
# per second the fake servers answered in that window and epp's CPU per scrape.
# Usage: tools/measure_rss.sh [N...]   (default: 0 100 1000; needs target/release/epp)
# Env: INTERVAL (1s), SETTLE (20), BASE (21000), EXPOSITION (a file the fake servers answer
# instead of their six-line default, e.g. tests/fixtures/metrics/vllm-0.33.0.txt, a real
# vLLM exposition of 53 KB); the fake servers' CPU per second is printed too, since at high
# scrape rates they can become the limit.
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
# Responses the fake servers answered so far (0 without them): asked by SIGUSR1, read from the log.
served() {
  [ -n "$1" ] || { echo 0; return; }
  local before
  before=$(grep -c '^served' "$work/fake.log" || true)
  kill -USR1 "$1"
  for _ in $(seq 50); do
    [ "$(grep -c '^served' "$work/fake.log" || true)" -gt "$before" ] && break
    sleep 0.02
  done
  grep '^served' "$work/fake.log" | tail -1 | cut -d' ' -f2
}
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
printf 'endpoints\tinterval\tVmRSS_KiB\tVmHWM_KiB\tcpu_ms_per_s\tfake_cpu_ms_per_s\tscrapes_per_s\tcpu_us_per_scrape\n'
for n in "${@:-0 100 1000}"; do
  for count in $n; do
    echo "endpoints:" >"$work/endpoints.yaml"
    for i in $(seq 0 $((count - 1))); do
      echo "  - {name: ep-$i, address: 127.0.0.1, port: $((base + i))}" >>"$work/endpoints.yaml"
    done
    [ "$count" = 0 ] && echo "endpoints: []" >"$work/endpoints.yaml"
    fake=""
    if [ "$count" -gt 0 ]; then
      # shellcheck disable=SC2086
      python3 tools/fake_metrics.py "$base" "$count" ${EXPOSITION:-} >"$work/fake.log" 2>&1 &
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
    f0=$([ -n "$fake" ] && cpu_ticks "$fake" || echo 0)
    s0=$(served "$fake")
    sleep "$((settle / 2))"
    c1=$(cpu_ticks "$pid")
    f1=$([ -n "$fake" ] && cpu_ticks "$fake" || echo 0)
    s1=$(served "$fake")
    cpu=$(( (c1 - c0) * 1000 / ticks / (settle / 2) ))
    fake_cpu=$(( (f1 - f0) * 1000 / ticks / (settle / 2) ))
    scrapes=$(( (s1 - s0) / (settle / 2) ))
    per_scrape=$([ "$scrapes" -gt 0 ] && echo $(( (c1 - c0) * 1000000 / ticks / (s1 - s0) )) || echo -)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$count" "$interval" "$(kib "$pid" VmRSS)" "$(kib "$pid" VmHWM)" \
      "$cpu" "$fake_cpu" "$scrapes" "$per_scrape"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    if [ -n "$fake" ]; then kill "$fake"; wait "$fake" 2>/dev/null || true; fi
  done
done
