#!/usr/bin/env python3
"""The peer benchmark: typemesh against PyTorch, one training step each.

For each of four steps (forward + backward + SGD, float32, one device; the
networks are described at the top of peer_steps.cpp) and for 1 and 2 threads,
this runs typemesh-bench-peer as a subprocess and the same step in PyTorch in
this process, alternating them for several rounds, and prints a Markdown
table: the median over rounds of each side's median step time, the ratio
PyTorch time / typemesh time (above 1: typemesh is faster), the same ratio
from each run's mean step, and the 1-minute load average before and after
the row was measured. Medians, because other work on a shared machine slows
a few steps at a time by up to 15%; the ratio of means keeps those in.

PyTorch is optional: without it the script says so in one line and exits 0.

    python3 bench/peer.py --binary build/bench/typemesh-bench-peer

A second table gives the per-op overhead: a chain of --overhead-ops (1000)
small elementwise ops on an 8 x 8 tensor with the tape on (y + x, y * 0.5,
relu(y) in turn) and backward through it, in microseconds per op, typemesh
(typemesh-bench-peer --overhead) against PyTorch eager, on one thread.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import peer_common

STEPS = ("mlp", "transformer", "rnnlm", "conv")
DESCRIPTIONS = {
    "mlp": "MLP 256×1024→4096→1024, softmax cross-entropy",
    "transformer": "Transformer encoder layer, batch 16, seq 128, d_model 512, 8 heads, d_ff 2048",
    "rnnlm": "RNNLM, vocab 8192, 2 LSTM layers of 512 units, seq 32, batch 32",
    "conv": "conv net, 32×32×64, 3×3 conv 64→64, max pool, dense",
}
# As in peer_steps.cpp.
LEARNING_RATE = {"mlp": 0.01, "transformer": 0.01, "rnnlm": 0.01, "conv": 0.001}
LINE = re.compile(r"^peer_step step=(\w+) threads=(\d+) .*mean_ms=([0-9.]+) .*median_ms=([0-9.]+) "
                  r".*kernel_threads=(\d+)")
OVERHEAD_LINE = re.compile(r"^peer_overhead .*forward_us_per_op=([0-9.]+) backward_us_per_op=([0-9.]+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", help="typemesh-bench-peer (default: the first build*/bench/typemesh-bench-peer)")
    peer_common.add_timing_arguments(p)
    p.add_argument("--step", action="append", choices=STEPS, help="only this step (repeatable; default all)")
    p.add_argument("--overhead-ops", type=int, default=1000,
                   help="ops in the per-op overhead chain (default 1000; 0: no overhead table)")
    a = p.parse_args()
    peer_common.check_timing_arguments(p, a)
    if a.overhead_ops < 0:
        p.error(f"--overhead-ops must be at least 0, not {a.overhead_ops}")
    a.step = a.step or list(STEPS)
    return a


def find_binary(given):
    if given:
        if not os.access(given, os.X_OK):
            sys.exit(f"peer.py: --binary {given} is not an executable file")
        return given
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for entry in sorted(os.listdir(root)):
        candidate = os.path.join(root, entry, "bench", "typemesh-bench-peer")
        if entry.startswith("build") and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("peer.py: no typemesh-bench-peer found under build*/bench/; build the target typemesh-bench-peer "
             "and pass it with --binary")


def typemesh_ms(binary, step, threads, args):
    cmd = [binary, "--step", step, "--threads", str(threads), "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"peer.py: {' '.join(cmd)} failed with status {run.returncode}:\n{run.stdout}{run.stderr}")
    peer_common.pass_on_advice(run.stderr)
    for line in run.stdout.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == step:
            if int(m.group(5)) != threads:
                sys.exit(f"peer.py: typemesh ran its kernels on {m.group(5)} threads, not the {threads} asked for")
            return float(m.group(4)), float(m.group(3))
    sys.exit(f"peer.py: no 'peer_step step={step}' line in the output of {' '.join(cmd)}:\n{run.stdout}")


def typemesh_overhead_us(binary, args):
    """typemesh's (forward, backward) microseconds per op of the overhead chain."""
    cmd = [binary, "--overhead", str(args.overhead_ops), "--threads", "1", "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"peer.py: {' '.join(cmd)} failed with status {run.returncode}:\n{run.stdout}{run.stderr}")
    peer_common.pass_on_advice(run.stderr)
    for line in run.stdout.splitlines():
        m = OVERHEAD_LINE.match(line)
        if m:
            return float(m.group(1)), float(m.group(2))
    sys.exit(f"peer.py: no 'peer_overhead' line in the output of {' '.join(cmd)}:\n{run.stdout}")


# ---------------------------------------------------------------- PyTorch


def torch_overhead_us(torch, args):
    """PyTorch eager's (forward, backward) microseconds per op of the same chain (medians over the runs)."""
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    forward, backward = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        y = x
        for k in range(args.overhead_ops):
            if k % 3 == 0:
                y = y + x
            elif k % 3 == 1:
                y = y * 0.5
            else:
                y = torch.relu(y)
        loss = y.sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if i >= args.warmup:
            forward.append(1e6 * (t1 - t0) / args.overhead_ops)
            backward.append(1e6 * (t2 - t1) / args.overhead_ops)
    return statistics.median(forward), statistics.median(backward)


def torch_step(torch, step):
    """The model, its optimizer and a closure that runs one training step."""
    nn, F = torch.nn, torch.nn.functional
    g = torch.Generator().manual_seed(1)

    if step == "mlp":
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))
        x = torch.randn(256, 1024, generator=g)
        y = torch.randint(0, 1024, (256,), generator=g)

        def loss_fn():
            return F.cross_entropy(model(x), y)

    elif step == "transformer":

        class EncoderLayer(nn.Module):
            # As typemesh's: no projection biases, layer norms with scale and bias.
            def __init__(self):
                super().__init__()
                self.wq, self.wk, self.wv, self.wo = (nn.Linear(512, 512, bias=False) for _ in range(4))
                self.ln1 = nn.LayerNorm(512, eps=1e-6)
                self.w1 = nn.Linear(512, 2048, bias=False)
                self.w2 = nn.Linear(2048, 512, bias=False)
                self.ln2 = nn.LayerNorm(512, eps=1e-6)

            def forward(self, x):
                b, l, d = x.shape

                def split(t):
                    return t.view(b, l, 8, 64).transpose(1, 2)

                att = F.scaled_dot_product_attention(split(self.wq(x)), split(self.wk(x)), split(self.wv(x)))
                h = self.ln1(x + self.wo(att.transpose(1, 2).reshape(b, l, d)))
                return self.ln2(h + self.w2(F.relu(self.w1(h))))

        model = EncoderLayer()
        x = torch.randn(16, 128, 512, generator=g)

        def loss_fn():
            return model(x).mean()

    elif step == "rnnlm":

        class RNNLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embedding = nn.Embedding(8192, 512)
                self.lstm = nn.LSTM(512, 512, num_layers=2, bias=False, batch_first=True)
                self.proj = nn.Linear(512, 8192, bias=False)

            def forward(self, ids):
                h, _ = self.lstm(self.embedding(ids))
                return self.proj(h)

        model = RNNLM()
        ids = torch.randint(0, 8192, (32, 32), generator=g)
        targets = torch.randint(0, 8192, (32, 32), generator=g)

        def loss_fn():
            return F.cross_entropy(model(ids).reshape(-1, 8192), targets.reshape(-1))

    else:  # conv, NHWC in memory as typemesh's (PyTorch's channels_last)
        model = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(16 * 16 * 64, 10))
        model = model.to(memory_format=torch.channels_last)
        x = torch.randn(32, 64, 32, 32, generator=g).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (32,), generator=g)

        def loss_fn():
            return F.cross_entropy(model(x), y)

    return peer_common.sgd_step(torch, model, loss_fn, LEARNING_RATE[step])


def main():
    args = parse_args()
    torch = peer_common.import_torch("the peer benchmark")
    if torch is None:
        return 0
    binary = find_binary(args.binary)

    peer_common.print_header(torch, binary, args)
    peer_common.print_cell_rule(args)

    peer_common.print_table("step", args.step, DESCRIPTIONS.get, args, torch, torch_step,
                            lambda step, threads: typemesh_ms(binary, step, threads, args), "peer.py")

    if args.overhead_ops:
        torch.set_num_threads(1)
        print(f"\nPer-op overhead: a chain of {args.overhead_ops} elementwise ops on 8 x 8 floats with the tape on, "
              "1 thread; µs per op, median over the runs; ratio = PyTorch / typemesh\n")
        print("| phase | PyTorch µs/op | typemesh µs/op | ratio | load (1 min) before → after |")
        print("|---|---|---|---|---|")
        load_before = os.getloadavg()[0]
        ours, theirs = peer_common.alternate(args.rounds, lambda: typemesh_overhead_us(binary, args),
                                             lambda: torch_overhead_us(torch, args))
        load_after = os.getloadavg()[0]
        for phase, j in (("forward (recording)", 0), ("backward", 1)):
            t_us = statistics.median(o[j] for o in ours)
            p_us = statistics.median(t[j] for t in theirs)
            print(f"| {phase} | {p_us:.2f} | {t_us:.2f} | {p_us / t_us:.2f} | {load_before:.2f} → {load_after:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
