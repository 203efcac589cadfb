#!/usr/bin/env python3
"""Training throughput of the four benchmark networks under every strategy.

For each network and strategy it trains the network at a reduced size on
--devices host devices (threads) and prints samples/s and the bytes each
device sends per step, read from the program's own metrics file; and, per
network, the time of one step on one device at the same size, the reference
the parallel runs are measured against. The machine's load average is
printed beside every row: on a shared machine the figures are only as good
as the load lets them be.

    python3 bench/networks.py --build build            # all four, 8 devices
    python3 bench/networks.py --build build --networks rnnlm --steps 20

Only the standard library is used. A network whose program was not built is
skipped with a note.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# The reduced sizes: small enough for a 2-core machine, large enough that the
# step is not all overhead. Every program takes the trainer's flags too.
NETWORKS = {
    "rnnlm": {
        "strategies": ["data-parallel", "pase", "gnmt", "flexflow"],
        "flags": ["--batch-size", "64", "--seq-len", "16", "--src-vocab-size", "4096", "--units", "256"],
        "size": "batch 64, 16 steps, vocab 4096, 256 units",
    },
    "alexnet": {
        "strategies": ["data-parallel", "pase", "owt", "flexflow"],
        "flags": ["--batch-size", "64", "--image-size", "67", "--width-divisor", "4", "--classes", "1000"],
        "size": "batch 64, 67x67 images, channels and fc units / 4, 1000 classes",
    },
    "inception": {
        "strategies": ["data-parallel", "pase", "owt", "flexflow"],
        "flags": ["--batch-size", "64", "--image-size", "75", "--channel-divisor", "8", "--classes", "1000"],
        "size": "batch 64, 75x75 images, channels / 8, 1000 classes",
    },
    "transformer": {
        "strategies": ["data-parallel", "pase", "mesh-tensorflow"],
        "flags": ["--batch-size", "64", "--seq-len", "16", "--src-vocab-size", "4096", "--tgt-vocab-size", "4096",
                  "--layers", "2", "--d-model", "128", "--heads", "4", "--d-k", "32", "--d-ff", "512"],
        "size": "batch 64, 16 positions, vocab 4096, 2+2 layers, d_model 128, 4 heads of 32, d_ff 512",
    },
}


def train(program, flags, devices, strategy, steps):
    """Runs `steps` SGD steps; returns (samples/s, bytes sent per device per step, seconds per step) over the
    steps after the first two (warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [program, "--devices", str(devices), "--strategy", str(strategy), "--epochs", "1", "--max-steps",
               str(steps), "--display-steps", "1", "--progress", "lines", "--backend", "host", "--metrics", metrics]
        run = subprocess.run(cmd + flags, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd + flags)} failed ({run.returncode}):\n{run.stderr}{run.stdout}")
        with open(metrics) as f:
            rows = [json.loads(line) for line in f]
    warm, last = rows[1], rows[-1]
    measured = last["step"] - warm["step"]
    seconds = last["wall_s"] - warm["wall_s"]
    batch = int(flags[flags.index("--batch-size") + 1])
    sent = [b - a for a, b in zip(warm["bytes_sent"], last["bytes_sent"])]
    return batch * measured / seconds, sum(sent) / len(sent) / measured, seconds / measured


def human_bytes(n):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="the CMake build directory")
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated, from " + ",".join(NETWORKS))
    parser.add_argument("--devices", type=int, default=8, help="host devices of the parallel runs")
    parser.add_argument("--steps", type=int, default=12, help="SGD steps per run (the first two are not measured)")
    args = parser.parse_args()
    if args.steps < 4:
        sys.exit("--steps must be at least 4")

    print(f"typemesh training throughput, {args.devices} host devices (threads), {os.cpu_count()} cores; "
          f"load average at start {os.getloadavg()[0]:.2f}")
    print()
    print("| network | size | strategy | samples/s | sent per device per step | 1-device step | "
          f"{args.devices}-device speed-up | load |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.networks.split(","):
        spec = NETWORKS.get(name)
        if spec is None:
            sys.exit(f"unknown network '{name}'")
        program = os.path.join(args.build, "examples", f"typemesh-{name}")
        if not os.path.exists(program):
            print(f"| {name} | not built ({program}) | | | | | | |")
            continue
        one_rate, _, one_step = train(program, spec["flags"], 1, 0, args.steps)
        for s, strategy in enumerate(spec["strategies"]):
            rate, sent, _ = train(program, spec["flags"], args.devices, s, args.steps)
            print(f"| {name} | {spec['size']} | {s} {strategy} | {rate:.1f} | {human_bytes(sent)} | "
                  f"{one_step * 1000:.0f} ms | {rate / one_rate:.2f} | {os.getloadavg()[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
