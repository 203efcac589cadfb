#!/usr/bin/env python3
"""The strategy tables of docs/models.md, drawn from the programs' own meshes.

Runs `typemesh-<network> --show-strategy` for every strategy and device count
and prints Markdown: per strategy, each mesh's shape and device order per
device count, and a picture of the meshes at --picture-devices devices (a
grid of device ids: rows along the first axis, columns along the others).

    python3 docs/scripts/strategy_tables.py --build build rnnlm > /tmp/rnnlm-tables.md
"""
import argparse
import os
import re
import subprocess
import sys

LINE = re.compile(r"^\s+mesh '([^']+)' \[([^\]]*)\] on devices \[([^\]]*)\](?::\s*(.*))?$")


def show(program, strategy, devices):
    run = subprocess.run([program, "--show-strategy", "--strategy", str(strategy), "--devices", str(devices)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None, (run.stderr or run.stdout).strip()
    meshes = []
    for line in run.stdout.splitlines():
        m = LINE.match(line)
        if m:
            axes = [(a.split("=")[0], int(a.split("=")[1])) for a in m.group(2).split()]
            meshes.append((m.group(1), axes, [int(d) for d in m.group(3).split()], m.group(4) or ""))
    return meshes, None


def ranges(devices):
    """'4..7 0..3' for [4, 5, 6, 7, 0, 1, 2, 3]."""
    parts, start = [], 0
    for i in range(1, len(devices) + 1):
        if i == len(devices) or devices[i] != devices[i - 1] + 1:
            a, b = devices[start], devices[i - 1]
            parts.append(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}..{b}")
            start = i
    if len(parts) > 10:  # a long interleaving: its start and end show the pattern
        parts = parts[:6] + ["…"] + parts[-2:]
    return ", ".join(parts)


def unique(meshes):
    seen, out = set(), []
    for m in meshes:
        if m[0] not in seen:
            seen.add(m[0])
            out.append(m)
    return out


def picture(name, axes, devices):
    """Device ids in a grid: rows along the first axis longer than 1, columns along the rest (row-major)."""
    long_axes = [s for _, s in axes if s > 1]
    rows = long_axes[0] if len(long_axes) > 1 else 1
    cols = len(devices) // rows
    width = max(len(str(d)) for d in devices)
    head = f"{name} [{' '.join(f'{a}={s}' for a, s in axes)}]"
    lines = [head]
    for r in range(rows):
        lines.append("  " + " ".join(str(d).rjust(width) for d in devices[r * cols:(r + 1) * cols]))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("network")
    parser.add_argument("--build", default="build")
    parser.add_argument("--counts", default="4,8,16,32,64")
    parser.add_argument("--picture-devices", type=int, default=8)
    args = parser.parse_args()
    program = os.path.join(args.build, "examples", f"typemesh-{args.network}")
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True).stdout
    names = re.search(r"Strategy, by number or name:([^\n]*)", help_text)
    strategies = [s.strip().split(" ", 1) for s in names.group(1).split(",")] if names else []
    counts = [int(c) for c in args.counts.split(",")]
    for number, name in strategies:
        print(f"#### Strategy {number}: {name}\n")
        table = {}
        for count in counts:
            meshes, failure = show(program, number, count)
            table[count] = unique(meshes) if meshes is not None else failure
        first = next((m for m in table.values() if isinstance(m, list)), [])
        print("| devices | " + " | ".join(f"`{m[0]}`" for m in first) + " |")
        print("| ---: | " + " | ".join("---" for _ in first) + " |")
        for count, meshes in table.items():
            if isinstance(meshes, str):
                print(f"| {count} | not given: {meshes} |")
                continue
            cells = []
            for mname, axes, devices, _ in meshes:
                shape = "×".join(str(s) for _, s in axes)
                order = ranges(devices)
                cells.append(f"{shape} on {order}")
            print(f"| {count} | " + " | ".join(cells) + " |")
        print()
        at = table.get(args.picture_devices)
        if isinstance(at, list):
            print("What lives where:\n")
            meshes, _ = show(program, number, args.picture_devices)
            for mname, axes, devices, text in meshes:
                print(f"- `{mname}`: {text}")
            print(f"\nThe meshes at {args.picture_devices} devices (device ids; rows: the first axis):\n")
            print("```text")
            for mname, axes, devices, _ in at:
                print("\n".join(picture(mname, axes, devices)))
            print("```\n")


if __name__ == "__main__":
    sys.exit(main())
