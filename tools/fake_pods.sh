# Sourced by the measurement scripts in tools/: starts N fake vLLM /metrics servers on
# 127.0.0.1 (tools/fake_metrics.py) and writes the endpoints file naming them.
# Usage: start_fake_pods DIR BASE_PORT COUNT  (appends the server's pid to the array `pids`)
start_fake_pods() {
  local dir=$1 base=$2 count=$3 i
  printf 'endpoints:\n' >"$dir/endpoints.yaml"
  for i in $(seq 0 $((count - 1))); do
    printf '  - {name: ep-%s, address: 127.0.0.1, port: %s}\n' "$i" $((base + i)) >>"$dir/endpoints.yaml"
  done
  python3 tools/fake_metrics.py "$base" "$count" >"$dir/fake.log" 2>&1 &
  pids+=($!)
}
