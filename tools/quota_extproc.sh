#!/usr/bin/env bash
# Tails under a CPU quota: epp (release build) and the no-op floor server (`epp-tools bench
# floor-server`) each in their own process inside a cgroup v1 `cpu` group with
# cpu.cfs_quota_us/cpu.cfs_period_us = QUOTA_US/PERIOD_US, the load generator
# (`epp-tools bench extproc --target --target-pid`) outside it. Per body size, the floor's sweep
# then epp's, JSON lines to OUT/<label>-<server>-<size>.jsonl (one `# quota` comment line first).
# Usage: tools/quota_extproc.sh LABEL QUOTA_US PERIOD_US "SIZE:RATES ..." (needs root and the
# cgroup v1 cpu controller at /sys/fs/cgroup/cpu; cgroup v2 would use cpu.max instead).
# Example: tools/quota_extproc.sh 1core 100000 100000 "1k:2000,4000,6000 10k:2000,4000,6000"
set -euo pipefail
cd "$(dirname "$0")/.."
label=$1 quota=$2 period=$3 plan=$4
epp=${EPP:-target/release/epp}
tools=${TOOLS:-target/release/epp-tools}
mode=${MODE:-full-duplex}
secs=${SECS:-5}
out=${OUT:-quota-out}
port=${PORT:-19302}
base=${BASE:-19400}
group=/sys/fs/cgroup/cpu/epp_quota_$label
mkdir -p "$out" "$group"
echo "$period" >"$group/cpu.cfs_period_us"
echo "$quota" >"$group/cpu.cfs_quota_us"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# Eight fake vLLM pods for epp.
# shellcheck source=tools/fake_pods.sh
. tools/fake_pods.sh
start_fake_pods "$out" "$base" 8

start_in_group() { # server
  case $1 in
    epp) set -- "$epp" --secure-serving=false --bind-address 127.0.0.1 --grpc-port "$port" --grpc-health-port 0 \
      --metrics-port 0 --endpoints-file "$out/endpoints.yaml" --drain-grace 0s ;;
    floor) set -- "$tools" bench floor-server --listen "127.0.0.1:$port" ;;
  esac
  # The shell joins the group, then becomes the server: its runtime sizes itself to the quota.
  RUST_LOG=warn sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@" >"$out/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    if "$tools" bench extproc --target "127.0.0.1:$port" --rate 1 --duration 1s --warmup 0s --json >/dev/null 2>&1; then
      return
    fi
    sleep 0.2
  done
  echo "$1 did not answer" >&2
  exit 1
}

for item in $plan; do
  size=${item%%:*} rates=${item#*:}
  for s in floor epp; do
    file="$out/$label-$s-$mode-$size.jsonl"
    echo "# quota $quota/$period us, $(uptime)" >>"$file"
    start_in_group "$s"
    "$tools" bench extproc --target "127.0.0.1:$port" --target-pid "$server" --rates "$rates" --duration "${secs}s" \
      --body-mode "$mode" --body-size "$size" --json | sed "s/^{/{\"quota\":\"$label\",\"srv\":\"$s\",/" >>"$file"
    echo "# throttled: $(grep -E 'nr_throttled|throttled_time' "$group/cpu.stat" | tr '\n' ' ')" >>"$file"
    kill -TERM "$server"
    wait "$server" || true
  done
done
