#!/usr/bin/env python3
"""One SVG chart of the loss curves in several metrics files (the trainer's
--metrics, JSON lines), one line per file, labelled by file name or by
LABEL=FILE. Only the standard library is used.

    python3 docs/scripts/plot_losses.py --title "RNNLM, 8 devices" -o docs/rnnlm-losses.svg \\
        data-parallel=dp.jsonl pase=pase.jsonl gnmt=gnmt.jsonl flexflow=ff.jsonl
"""
import argparse
import json
import os
from html import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
DASHES = ["", "6,3", "2,3", "8,3,2,3", "4,4", "1,2"]


def read(path):
    points = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("loss") is not None:
                points.append((row["step"], row["loss"]))
    return points


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="FILE or LABEL=FILE")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="loss")
    args = parser.parse_args()
    series = []
    for spec in args.files:
        label, _, path = spec.rpartition("=")
        series.append((label or os.path.basename(path), read(path)))
    steps = [s for _, pts in series for s, _ in pts]
    losses = [l for _, pts in series for _, l in pts]
    if not steps:
        raise SystemExit("no losses in the files")
    x0, x1 = min(steps), max(steps)
    y0, y1 = min(losses), max(losses)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    w, h, left, right, top, bottom = 640, 360, 60, 150, 30, 40
    pw, ph = w - left - right, h - top - bottom
    sx = lambda x: left + (x - x0) / (x1 - x0) * pw
    sy = lambda y: top + (1 - (y - y0) / (y1 - y0)) * ph
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{escape(args.title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        x = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{x:.0f}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 6}" text-anchor="middle">step</text>')
    for i, (label, pts) in enumerate(series):
        colour, dash = COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)]
        path = " ".join(f"{sx(s):.1f},{sy(l):.1f}" for s, l in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        ly = top + 14 + 16 * i
        out.append(f'<line x1="{left + pw + 10}" x2="{left + pw + 34}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + ' stroke-width="1.5"/>')
        out.append(f'<text x="{left + pw + 40}" y="{ly}">{escape(label)}</text>')
    out.append("</svg>")
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
