#!/usr/bin/env python3
"""Plots of the fleet simulator (docs/plots/sim-*.svg) from `epp-tools sim --json` output.

Standard library only; writes SVG directly. Two steps, both by default:

  python3 tools/sim_plots.py --epp "$CARGO_TARGET_DIR/release/epp"   # run epp-tools sim, then plot
  python3 tools/sim_plots.py --plot-only                              # re-plot the saved JSON

Runs (saved under docs/plots/data/): the default 8-pod shared-prefix scenario with prefixes
at 90 % of the fleet's KV cache, 1,500 requests at each fixed rate of QPS (one `epp-tools sim
--json` per rate, every policy), and `epp-tools sim --kv-sweep --json` at 20 qps. Plots: prefix
hit rate and TTFT p90 against the rate per policy; precise's hit rate against KV-event
delay and loss, with approximate and the oracle as reference lines.
"""

import argparse
import json
import math
import os
import subprocess
import sys

QPS = [5, 10, 15, 20, 25, 30, 40]
BASE = ["sim", "--json", "--kv-fill", "0.9", "--requests", "1500"]
COLORS = {
    "random": "#999999",
    "round-robin": "#bbbb44",
    "load": "#66aadd",
    "approximate": "#ee8833",
    "precise": "#2277bb",
    "oracle": "#33aa55",
}
W, H, L, R, T, B = 640, 400, 70, 150, 40, 50


def run(epp, args, path):
    out = subprocess.run([epp] + args, check=True, capture_output=True, text=True).stdout
    with open(path, "w") as f:
        f.write(out)
    print("wrote", path, file=sys.stderr)


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;")


def frame(title, xlabel, ylabel):
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{esc(title)}</text>',
        f'<text x="{L + (W - L - R) / 2}" y="{H - 10}" text-anchor="middle">{esc(xlabel)}</text>',
        f'<text transform="translate(16,{T + (H - T - B) / 2}) rotate(-90)" text-anchor="middle">{esc(ylabel)}</text>',
        f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#333"/>',
    ]


def save(path, out):
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", path, file=sys.stderr)


def scale(lo, hi, a, b, log=False):
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    return lambda v: a + ((math.log10(v) if log else v) - lo) / ((hi - lo) or 1) * (b - a)


def ticks(lo, hi, log):
    if log:
        return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = (hi - lo) / 5
    return [lo + i * step for i in range(6)]


def line_chart(path, title, xlabel, ylabel, series, ylog=False, ymin=None, ymax=None):
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0 = ymin if ymin is not None else min(ys)
    y1 = ymax if ymax is not None else max(ys)
    if ylog:
        y0, y1 = 10 ** math.floor(math.log10(max(y0, 1e-3))), 10 ** math.ceil(math.log10(y1))
    sx, sy = scale(x0, x1, L, W - R), scale(y0, y1, H - B, T, ylog)
    out = frame(title, xlabel, ylabel)
    for v in ticks(y0, y1, ylog):
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:g}</text>')
    for i, (name, pts) in enumerate(series.items()):
        color = COLORS.get(name, "#000")
        d = " ".join(f"{sx(x):.1f},{sy(max(y, y0)):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(max(y, y0)):.1f}" r="3" fill="{color}"/>')
        ly = T + 14 + i * 18
        out.append(f'<line x1="{W - R + 10}" x2="{W - R + 30}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 36}" y="{ly}">{esc(name)}</text>')
    save(path, out)


def sweep_chart(path, sweep):
    rows = sweep["sweep"]["rows"]
    refs = {r["policy"]: r["hit_rate"] * 100 for r in sweep["sweep"]["references"]}
    labels = []
    for r in rows:
        e = r["events"]
        parts = [f"{e['delay'] * 1e3:g} ms"]
        if e["jitter"]:
            parts.append(f"+{e['jitter'] * 1e3:g} jit")
        if e["loss"]:
            parts.append(f"{e['loss'] * 100:g}% loss")
        labels.append(", ".join(parts))
    out = frame("precise hit rate vs KV-event delay and loss (8 pods, 20 qps, 90 % KV)", "KV-event path (delay, jitter, loss)", "prefix hit rate (%)")
    sy = scale(0, 100, H - B, T)
    for v in range(0, 101, 20):
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v}</text>')
    bw = (W - L - R) / max(len(rows), 1)
    for i, (r, label) in enumerate(zip(rows, labels)):
        hit = r["precise"]["hit_rate"] * 100
        x = L + i * bw + bw * 0.15
        out.append(f'<rect x="{x:.1f}" y="{sy(hit):.1f}" width="{bw * 0.7:.1f}" height="{sy(0) - sy(hit):.1f}" fill="{COLORS["precise"]}"/>')
        cx, cy = x + bw * 0.35, H - B + 8
        out.append(f'<text transform="translate({cx:.1f},{cy}) rotate(35)" font-size="9">{esc(label)}</text>')
    for i, (name, hit) in enumerate(refs.items()):
        color = COLORS.get(name, "#000")
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(hit):.1f}" y2="{sy(hit):.1f}" stroke="{color}" stroke-dasharray="6,4" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 8}" y="{sy(hit) + 4 + i * 12:.1f}" fill="{color}">{esc(name)} {hit:.1f}%</text>')
    save(path, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epp", default="target/release/epp", help="epp binary (release build)")
    ap.add_argument("--out", default="docs/plots", help="output directory")
    ap.add_argument("--plot-only", action="store_true", help="re-plot the saved JSON")
    a = ap.parse_args()
    data = os.path.join(a.out, "data")
    os.makedirs(data, exist_ok=True)
    if not a.plot_only:
        for q in QPS:
            run(a.epp, BASE + ["--qps", str(q)], os.path.join(data, f"sim-qps-{q}.json"))
        run(a.epp, BASE + ["--qps", "20", "--kv-sweep"], os.path.join(data, "sim-kv-sweep.json"))
    hit, ttft = {}, {}
    for q in QPS:
        with open(os.path.join(data, f"sim-qps-{q}.json")) as f:
            for r in json.load(f)["results"]:
                hit.setdefault(r["policy"], []).append((q, r["hit_rate"] * 100))
                ttft.setdefault(r["policy"], []).append((q, r["ttft_p90_s"]))
    line_chart(os.path.join(a.out, "sim-hit-rate-vs-qps.svg"), "Prefix hit rate, 8 pods, prefixes at 90 % of KV",
               "offered load (requests/s)", "prefix hit rate (%)", hit, ymin=0, ymax=100)
    line_chart(os.path.join(a.out, "sim-ttft-p90-vs-qps.svg"), "TTFT p90, 8 pods, prefixes at 90 % of KV",
               "offered load (requests/s)", "TTFT p90 (s, log scale)", ttft, ylog=True)
    with open(os.path.join(data, "sim-kv-sweep.json")) as f:
        sweep_chart(os.path.join(a.out, "sim-kv-sweep.svg"), json.load(f))


if __name__ == "__main__":
    main()
