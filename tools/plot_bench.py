#!/usr/bin/env python3
"""Latency-vs-rate plot of `epp-tools bench extproc --json` output, as a self-contained SVG.

Usage: python3 tools/plot_bench.py OUT.svg RUN.jsonl [RUN.jsonl ...]

Each input file is one series (its name, without directory and extension, is the legend
label); rows with the same `rate_target` inside a file (repeated runs) are reduced to their
medians, which are also printed as a Markdown table (the one in docs/benchmarks.md). The
plot shows p99 (solid) and p50 (dashed) latency in milliseconds on a log scale against the
offered rate, with the 5 ms objective as a horizontal line. Standard library only.
"""

import json
import math
import statistics
import sys
from pathlib import Path

W, H = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 60
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]
SLO_MS = 5.0


def rows_by_rate(path):
    """rate -> rows of one JSON-lines file."""
    by_rate = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        by_rate.setdefault(float(row["rate_target"]), []).append(row)
    return dict(sorted(by_rate.items()))


def load(path):
    """rate -> (median p50 ms, median p99 ms) for one JSON-lines file."""
    out = {}
    for rate, rows in rows_by_rate(path).items():
        out[rate] = (
            statistics.median(r["p50_us"] for r in rows) / 1000.0,
            statistics.median(r["p99_us"] for r in rows) / 1000.0,
        )
    return out


def svg(series):
    rates = [r for s in series.values() for r in s]
    values = [v for s in series.values() for pair in s.values() for v in pair] + [SLO_MS]
    x_max = max(rates) * 1.05 if rates else 1.0
    y_lo = 10 ** math.floor(math.log10(max(min(values), 0.01)))
    y_hi = 10 ** math.ceil(math.log10(max(values)))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(v):
        return LEFT + pw * v / x_max

    def y(v):
        v = max(v, y_lo)
        return TOP + ph * (1 - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14">ext_proc decision latency vs offered rate (solid p99, dashed p50)</text>',
    ]
    decade = y_lo
    while decade <= y_hi * 1.0001:
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(decade) + 4:.1f}" text-anchor="end">{decade:g}</text>')
        decade *= 10
    step = 10 ** math.floor(math.log10(x_max)) if x_max >= 1 else 1
    if x_max / step < 4:
        step /= 2
    tick = 0.0
    while tick <= x_max:
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="#eee"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{tick:g}</text>')
        tick += step
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">offered rate (requests/s)</text>')
    parts.append(
        f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {TOP + ph / 2})">latency (ms, log)</text>'
    )
    parts.append(
        f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(SLO_MS):.1f}" y2="{y(SLO_MS):.1f}" stroke="#000" stroke-dasharray="2,4"/>'
    )
    parts.append(f'<text x="{LEFT + pw - 4}" y="{y(SLO_MS) - 4:.1f}" text-anchor="end">5 ms objective</text>')
    for i, (label, points) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        for idx, dash in ((1, ""), (0, ' stroke-dasharray="5,4"')):
            coords = " ".join(f"{x(r):.1f},{y(p[idx]):.1f}" for r, p in points.items())
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for r, p in points.items():
            parts.append(f'<circle cx="{x(r):.1f}" cy="{y(p[1]):.1f}" r="3" fill="{colour}"/>')
        ly = TOP + 14 + 18 * i
        parts.append(f'<line x1="{LEFT + pw + 12}" x2="{LEFT + pw + 34}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{LEFT + pw + 40}" y="{ly}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def table(paths):
    """Markdown table of per-rate medians over repeated runs."""
    cols = ["rate_achieved", "p50_us", "p99_us", "p999_us", "cpu_us_per_req", "process_cpu_us_per_req", "kv_events_per_s", "epp_runq_wait_pct"]
    lines = [
        "| series | offered/s | runs | achieved/s | p50 us | p99 us | p99.9 us | epp CPU us/req | process CPU us/req | KV events/s | epp run-queue wait % | errors+dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        for rate, rows in rows_by_rate(path).items():
            med = [statistics.median(r.get(c) or 0 for r in rows) for c in cols]
            bad = sum(r.get("errors", 0) + r.get("dropped", 0) for r in rows)
            cells = [f"{v:.0f}" for v in med]
            lines.append(f"| {Path(path).stem} | {rate:.0f} | {len(rows)} | " + " | ".join(cells) + f" | {bad} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    series = {Path(p).stem: load(p) for p in argv[2:]}
    Path(argv[1]).write_text(svg(series))
    print(table(argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
