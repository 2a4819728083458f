#!/usr/bin/env bash
# Runs every fuzz target for a bounded time, one at a time (CPU is scarce).
# Usage: fuzz/run.sh [seconds per target, default 60]. Needs `cargo install cargo-fuzz` and a
# nightly toolchain. Corpora start from tests/fixtures (copied into fuzz/corpus/<target>/).
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
fixtures=../tests/fixtures
seed() { # seed TARGET FILES...
    local dir="corpus/$1"; shift
    mkdir -p "$dir"
    for f in "$@"; do [ -f "$f" ] && cp "$f" "$dir/" || true; done
}
seed request_parsers "$fixtures"/requests/*.json
seed chat_template "$fixtures"/requests/*.json
seed prom_text "$fixtures"/metrics/*.txt
seed endpoints_file ../deploy/examples/endpoints.yaml
seed picker_config "$fixtures"/configs/*.yaml ../deploy/configs/*.yaml
seed cel seeds/cel/*
seed extproc_stream seeds/extproc_stream/*
seed kv_event_batch "$fixtures"/kv_events/*
targets=(extproc_stream request_parsers prom_text endpoints_file picker_config cel chat_template zmtp_frames kv_event_batch)
for t in "${targets[@]}"; do
    echo "== $t (${secs}s)"
    mkdir -p "corpus/$t" # a target with no seeds (zmtp_frames) starts from an empty corpus
    cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 2>&1 | tail -4
done
