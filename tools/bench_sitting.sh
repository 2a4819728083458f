#!/usr/bin/env bash
# One benchmark sitting for docs/benchmarks.md: every wall-clock figure of that page, each next
# to the anchor it is compared with (the no-op ext_proc floor, Dynamo's indexers), run back to
# back on one machine so that ratios are taken under the same conditions. Each section appends
# its raw output to OUT/<section>.txt (JSON lines where the tool has them) after a header line
# with the time and /proc/loadavg. Instruction counts (tools/callgrind_extproc.sh) do not depend
# on load and are not part of a sitting.
# Usage: tools/bench_sitting.sh OUT [SECTION...]
#   SECTION: decision extproc quota idle criterion index redis replicas (default: all, in
#   that order; replicas needs redis-server)
# Needs: release builds of epp and epp-tools (EPP, TOOLS), `cargo bench --workspace --no-run`
# done beforehand (criterion, index, redis), root for the cgroup quotas (quota), redis-server
# (redis), and for index: DYNAMO_BIN (../shared/tools/dynamo-rs built as its README says),
# WORKLOADS (workload.py directories) and ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/bench_sitting.sh OUT [SECTION...]}
shift
sections=${*:-decision extproc quota idle criterion index redis replicas}
epp=${EPP:-target/release/epp}
tools=${TOOLS:-target/release/epp-tools}
export EPP=$epp TOOLS=$tools RUST_LOG=warn
mkdir -p "$out"

header() { # file what
  echo "# $2 | $(date -u +%FT%TZ) | load $(cut -d' ' -f1-3 /proc/loadavg) | $(git rev-parse --short HEAD)" >>"$1"
}

for section in $sections; do
  log="$out/$section.txt"
  case $section in
    decision) # the in-process decision (parse, estimate, prefix match, scorers, pick)
      for _ in 1 2 3; do
        header "$log" "bench decision 10 KB, 8 endpoints"
        "$tools" bench decision --body-bytes 10000 --endpoints 8 --iterations 20000 >>"$log" 2>&1
      done ;;
    extproc) # open loop, in-process epp and the floor alternating at each rate
      for mode in full-duplex buffered; do
        for plan in 1k:1000,2000,5000,8000 10k:1000,2000,5000,8000 100k:250,500,1000; do
          header "$log" "bench extproc --floor $mode ${plan%%:*}"
          "$tools" bench extproc --floor --json --body-mode "$mode" --body-size "${plan%%:*}" \
            --rates "${plan#*:}" --duration 3s >>"$log" 2>&1
        done
      done ;;
    quota) # epp and the floor each in its own process under a cgroup CPU quota
      header "$log" "tools/quota_extproc.sh (JSON lines in $out/quota/)"
      OUT="$out/quota" MODE=full-duplex tools/quota_extproc.sh 1core 100000 100000 \
        "1k:1000,2000,4000,6000,8000 10k:1000,2000,4000,6000,8000 100k:250,500,1000,1500" >>"$log" 2>&1
      OUT="$out/quota" MODE=full-duplex tools/quota_extproc.sh quarter 25000 100000 \
        "1k:200,400,800,1200,1600 10k:200,400,800,1200,1600 100k:50,100,200,400" >>"$log" 2>&1
      OUT="$out/quota" MODE=buffered tools/quota_extproc.sh 1core 100000 100000 \
        "10k:1000,2000,4000,6000,8000" >>"$log" 2>&1 ;;
    idle) # RSS and idle CPU against 8, 100 and 1,000 scraped endpoints at the default 50 ms,
      # answering a six-line exposition, then 8 and 100 answering a real vLLM one (53 KB)
      header "$log" "tools/measure_rss.sh 8 100 1000, 50 ms interval, six-line exposition"
      INTERVAL=50ms SETTLE=20 tools/measure_rss.sh 8 100 1000 >>"$log" 2>&1
      header "$log" "tools/measure_rss.sh 8 100, 50 ms interval, vLLM 0.33 exposition (53 KB)"
      EXPOSITION=tests/fixtures/metrics/vllm-0.33.0.txt INTERVAL=50ms SETTLE=20 \
        tools/measure_rss.sh 8 100 >>"$log" 2>&1 ;;
    criterion) # parse, tokenizer, loopback round trip, decision (criterion)
      header "$log" "cargo bench body_parse, tokenize, extproc_roundtrip, decision"
      cargo bench --locked --bench body_parse -- --warm-up-time 1 --measurement-time 3 >>"$log" 2>&1
      cargo bench --locked --bench tokenize -- --warm-up-time 1 --measurement-time 4 >>"$log" 2>&1
      cargo bench --locked -p epp-tools --bench extproc_roundtrip -- --warm-up-time 2 --measurement-time 5 >>"$log" 2>&1
      cargo bench --locked -p epp-tools --bench decision -- --warm-up-time 1 --measurement-time 3 >>"$log" 2>&1 ;;
    index) # the prefix index: criterion (apply, lookup at 10 M entries, bytes and RSS) and
      # alternating workload replays against Dynamo's Rust indexers
      header "$log" "cargo bench kv_index -- --quick"
      cargo bench --locked --bench kv_index -- --quick >>"$log" 2>&1
      header "$log" "rounds.py (JSON lines in $out/rounds.jsonl)"
      # shellcheck disable=SC2086
      python3 "${ROUNDS_PY:-../shared/tools/dynamo-rs/rounds.py}" --rounds "${ROUNDS:-3}" \
        --workloads $WORKLOADS --dynamo-bin "$DYNAMO_BIN" --epp-bin "$tools" \
        --impls radix crtc epp-request epp-engine --out "$out/rounds.jsonl" >>"$log" 2>&1 ;;
    redis) # llm-d's shared Redis index on loopback
      header "$log" "cargo bench redis_index"
      cargo bench --locked --bench redis_index >>"$log" 2>&1 ;;
    replicas) # active-active replicas: hit rates with and without sync, then sync under load
      # (in-process replicas and a loopback redis-server), then real epp processes
      header "$log" "sim --replicas 1,2,4 --replica-sync auto --json"
      "$tools" sim --replicas 1,2,4 --replica-sync auto --json >>"$log" 2>&1
      header "$log" "sim --replicas 4 --replica-sync auto --decision-rate 5000 (3 rounds) --json"
      "$tools" sim --replicas 4 --replica-sync auto --decision-rate 5000 --decision-seconds 5 \
        --replica-rounds 3 --json >>"$log" 2>&1
      header "$log" "sim --wire --wire-processes --replicas 1,4 --replica-sync auto --json"
      "$tools" sim --wire --wire-processes --epp-bin "$epp" --replicas 1,4 --replica-sync auto \
        --json >>"$log" 2>&1 ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
  header "$log" "end of $section"
done
