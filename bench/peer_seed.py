#!/usr/bin/env python3
"""The seed networks in the peer benchmark: typemesh against PyTorch, one SGD step each.

The four example networks (examples/alexnet.cpp, inception.cpp, rnnlm.cpp,
transformer.cpp) at reduced sizes, on one device and the data-parallel
strategy, and the same networks written layer by layer in PyTorch. For each
network and each thread count this runs the typemesh program as a
subprocess and the PyTorch step in this process, alternating which goes
first for --rounds rounds, and prints a Markdown table: the median over the
rounds of each side's median step time, the ratio PyTorch time / typemesh
time (above 1: typemesh is faster), the same ratio from each run's mean
step, and the 1-minute load average before and after the row. Medians,
because other work on a shared machine slows a few steps at a time.

    python3 bench/peer_seed.py --examples build/examples

typemesh's time per step comes from the program's --metrics file written at
every step (--display-steps 1): each line holds wall_s, the seconds since the
training loop started, taken right after that step. A step's time is the
difference between its wall_s and the previous step's, so start-up,
parameter initialisation and the warm-up steps are left out.
Both reuse one synthetic batch, as the reference does: the programs make
it at the first step; a typemesh step still imports it into the device's
tensors.

Threads: OPENBLAS_NUM_THREADS=N for the typemesh program (its device's
kernels and BLAS calls then use N threads, docs/backend.md), and
torch.set_num_threads(N) here.

Dropout is on in both (rate 0.5 where the example has it). PyTorch is
optional: without it the script says so in one line and exits 0.
"""

import argparse
import json
import math
import os
import subprocess
import statistics
import sys
import tempfile

import peer_common

NETWORKS = ("alexnet", "inception", "rnnlm", "transformer")

# The reduced sizes, shared by both sides. Each network's flags for its
# typemesh program are made from these.
SIZES = {
    "alexnet": dict(batch=32, image=67, width_divisor=4, classes=1000),
    "inception": dict(batch=16, image=75, channel_divisor=4, classes=100),
    "rnnlm": dict(batch=32, seq=16, units=256, vocab=4000),
    "transformer": dict(batch=16, seq=32, layers=2, d_model=128, heads=4, d_k=32, d_ff=512, src_vocab=2000,
                        tgt_vocab=2000),
}
LEARNING_RATE = 0.01  # the programs' default
DROPOUT = 0.5  # AlexNet's fc6-fc8, the Transformer's attention weights and feed-forward hidden layer
LAYER_NORM_EPSILON = 1e-6  # typemesh::layer_norm's default (Mesh-TensorFlow's)


def flags(network):
    z = SIZES[network]
    common = ["--batch-size", str(z["batch"]), "--lr", str(LEARNING_RATE)]
    if network == "alexnet":
        return common + ["--image-size", str(z["image"]), "--width-divisor", str(z["width_divisor"]),
                         "--classes", str(z["classes"])]
    if network == "inception":
        return common + ["--image-size", str(z["image"]), "--channel-divisor", str(z["channel_divisor"]),
                         "--classes", str(z["classes"])]
    if network == "rnnlm":
        return common + ["--seq-len", str(z["seq"]), "--units", str(z["units"]), "--src-vocab-size", str(z["vocab"])]
    return common + ["--seq-len", str(z["seq"]), "--layers", str(z["layers"]), "--d-model", str(z["d_model"]),
                     "--heads", str(z["heads"]), "--d-k", str(z["d_k"]), "--d-ff", str(z["d_ff"]),
                     "--src-vocab-size", str(z["src_vocab"]), "--tgt-vocab-size", str(z["tgt_vocab"])]


def describe(network):
    z = SIZES[network]
    if network == "alexnet":
        return (f"AlexNet, batch {z['batch']}, {z['image']}×{z['image']}×3, channels and fc units / "
                f"{z['width_divisor']}, {z['classes']} classes")
    if network == "inception":
        return (f"Inception-v3, batch {z['batch']}, {z['image']}×{z['image']}×3, channels / "
                f"{z['channel_divisor']}, {z['classes']} classes")
    if network == "rnnlm":
        return f"RNNLM, batch {z['batch']}, seq {z['seq']}, 2 LSTM × {z['units']}, vocab {z['vocab']}"
    return (f"Transformer, batch {z['batch']}, seq {z['seq']}, {z['layers']}+{z['layers']} layers, d_model "
            f"{z['d_model']}, {z['heads']} heads × {z['d_k']}, d_ff {z['d_ff']}, vocab {z['src_vocab']}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", help="the folder holding typemesh-alexnet, -inception, -rnnlm, -transformer "
                                      "(default: the first build*/examples that has them)")
    peer_common.add_timing_arguments(p)
    p.add_argument("--network", action="append", choices=NETWORKS, help="only this network (repeatable; default all)")
    a = p.parse_args()
    peer_common.check_timing_arguments(p, a)
    a.network = a.network or list(NETWORKS)
    return a


def find_examples(given, networks):
    def complete(folder):
        return all(os.access(os.path.join(folder, f"typemesh-{n}"), os.X_OK) for n in networks)

    if given:
        if not complete(given):
            sys.exit(f"peer_seed.py: --examples {given} lacks one of " +
                     ", ".join(f"typemesh-{n}" for n in networks))
        return given
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for entry in sorted(os.listdir(root)):
        candidate = os.path.join(root, entry, "examples")
        if entry.startswith("build") and complete(candidate):
            return candidate
    sys.exit("peer_seed.py: no build*/examples/ holds " + ", ".join(f"typemesh-{n}" for n in networks) +
             "; build those targets and pass their folder with --examples")


def typemesh_ms(examples, network, threads, args):
    """typemesh's (median, mean) milliseconds per step, from the wall_s of the program's per-step metrics."""
    binary = os.path.join(examples, f"typemesh-{network}")
    total = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [binary, "--devices", "1", "--strategy", "0", "--backend", "host", "--epochs", "1",
               "--max-steps", str(total), "--display-steps", "1", "--progress", "lines", "--metrics", metrics]
        cmd += flags(network)
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            sys.exit(f"peer_seed.py: {' '.join(cmd)} failed with status {run.returncode}:\n{run.stdout}{run.stderr}")
        peer_common.pass_on_advice(run.stderr)
        with open(metrics) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    wall = {line["step"]: line["wall_s"] for line in lines}
    wall[0] = 0.0  # the training loop's start
    if any(i not in wall for i in range(args.warmup, total + 1)):
        sys.exit(f"peer_seed.py: the metrics of {' '.join(cmd)} lack some of steps {args.warmup} to {total}: {lines}")
    loss = lines[-1]["loss"]
    if loss is None or not math.isfinite(loss):
        sys.exit(f"peer_seed.py: typemesh-{network}'s last loss is not finite ({loss})")
    steps = [1e3 * (wall[i] - wall[i - 1]) for i in range(args.warmup + 1, total + 1)]
    return statistics.median(steps), statistics.fmean(steps)


# ---------------------------------------------------------------- PyTorch


def torch_model(torch, network):
    """The network as the example writes it, its inputs (one batch) and its loss function."""
    nn, F = torch.nn, torch.nn.functional
    g = torch.Generator().manual_seed(1)
    z = SIZES[network]
    cl = torch.channels_last

    if network == "alexnet":
        c = [n // z["width_divisor"] for n in (96, 256, 384, 384, 256)]
        fc = 4096 // z["width_divisor"]
        side = (z["image"] - 11) // 4 + 1
        for _ in range(3):
            side = (side - 3) // 2 + 1

        class AlexNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(
                    nn.Conv2d(3, c[0], 11, stride=4), nn.ReLU(), nn.MaxPool2d(3, 2),
                    nn.Conv2d(c[0], c[1], 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
                    nn.Conv2d(c[1], c[2], 3, padding=1), nn.ReLU(),
                    nn.Conv2d(c[2], c[3], 3, padding=1), nn.ReLU(),
                    nn.Conv2d(c[3], c[4], 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
                # fc6 reduces pool5's height, width and channels; in NHWC memory
                # that order is a view, no copy.
                self.classifier = nn.Sequential(
                    nn.Linear(side * side * c[4], fc), nn.ReLU(), nn.Dropout(DROPOUT),
                    nn.Linear(fc, fc), nn.ReLU(), nn.Dropout(DROPOUT),
                    nn.Linear(fc, z["classes"]), nn.Dropout(DROPOUT))  # the reference drops out of fc8 too

            def forward(self, x):
                return self.classifier(self.features(x).permute(0, 2, 3, 1).flatten(1))

        model = AlexNet().to(memory_format=cl)
        x = torch.rand(z["batch"], 3, z["image"], z["image"], generator=g).contiguous(memory_format=cl)
        y = torch.randint(0, z["classes"], (z["batch"],), generator=g)
        return model, lambda: F.cross_entropy(model(x), y)

    if network == "inception":
        d = z["channel_divisor"]

        def ch(n):
            return n // d

        class BasicConv(nn.Module):
            # A convolution with a bias, then a layer norm over the batch dim
            # (the example's, after the reference), no activation. PyTorch's
            # fused layer norm wants the normalised dim last: the batch is
            # moved there and back (two copies), which was about a quarter
            # faster here than torch.var_mean over dim 0 and four
            # elementwise ops.
            def __init__(self, cin, cout, kh, kw, stride=1, same=False):
                super().__init__()
                pad = ((kh - 1) // 2, (kw - 1) // 2) if same else 0
                self.conv = nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=pad)
                self.scale = nn.Parameter(torch.ones(z["batch"]))
                self.shift = nn.Parameter(torch.zeros(z["batch"]))

            def forward(self, x):
                y = self.conv(x)
                n, c, h, w = y.shape
                rows = y.permute(2, 3, 1, 0).reshape(h * w * c, n)
                normed = F.layer_norm(rows, (n,), self.scale, self.shift, LAYER_NORM_EPSILON)
                return normed.view(h, w, c, n).permute(3, 2, 0, 1).contiguous(memory_format=cl)

        def max_pool(stride, same=False):
            return nn.MaxPool2d(3, stride, padding=1 if same else 0)

        def avg_pool():
            # TensorFlow's SAME average: the padding is not counted.
            return nn.AvgPool2d(3, 1, padding=1, count_include_pad=False)

        class Branches(nn.Module):
            def __init__(self, *branches):
                super().__init__()
                self.branches = nn.ModuleList(nn.Sequential(*b) for b in branches)

            def forward(self, x):
                return torch.cat([b(x) for b in self.branches], dim=1)

        def inception_a(cin, pool_features):
            return Branches(
                [BasicConv(cin, ch(64), 1, 1)],
                [BasicConv(cin, ch(48), 1, 1), BasicConv(ch(48), ch(64), 5, 5, same=True)],
                [BasicConv(cin, ch(64), 1, 1), BasicConv(ch(64), ch(96), 3, 3, same=True),
                 BasicConv(ch(96), ch(96), 3, 3, same=True)],
                [max_pool(1, same=True), BasicConv(cin, pool_features, 1, 1)])

        def inception_b(cin):
            return Branches(
                [BasicConv(cin, ch(384), 3, 3, stride=2)],
                [BasicConv(cin, ch(64), 1, 1), BasicConv(ch(64), ch(96), 3, 3, same=True),
                 BasicConv(ch(96), ch(96), 3, 3, stride=2)],
                [max_pool(2)])

        def inception_c(cin, c7):
            return Branches(
                [BasicConv(cin, ch(192), 1, 1)],
                [BasicConv(cin, c7, 1, 1), BasicConv(c7, c7, 1, 7, same=True), BasicConv(c7, ch(192), 7, 1, same=True)],
                [BasicConv(cin, c7, 1, 1), BasicConv(c7, c7, 7, 1, same=True), BasicConv(c7, c7, 1, 7, same=True),
                 BasicConv(c7, c7, 7, 1, same=True), BasicConv(c7, ch(192), 1, 7, same=True)],
                [avg_pool(), BasicConv(cin, ch(192), 1, 1)])

        def inception_d(cin):
            return Branches(
                [BasicConv(cin, ch(192), 1, 1), BasicConv(ch(192), ch(320), 3, 3, stride=2)],
                [BasicConv(cin, ch(192), 1, 1), BasicConv(ch(192), ch(192), 1, 7, same=True),
                 BasicConv(ch(192), ch(192), 7, 1, same=True), BasicConv(ch(192), ch(192), 3, 3, stride=2)],
                [max_pool(2)])

        class InceptionE(nn.Module):
            def __init__(self, cin):
                super().__init__()
                self.b1 = BasicConv(cin, ch(320), 1, 1)
                self.b3 = BasicConv(cin, ch(384), 1, 1)
                self.b3a = BasicConv(ch(384), ch(384), 1, 3, same=True)
                self.b3b = BasicConv(ch(384), ch(384), 3, 1, same=True)
                self.d1 = BasicConv(cin, ch(448), 1, 1)
                self.d2 = BasicConv(ch(448), ch(384), 3, 3, same=True)
                self.d3a = BasicConv(ch(384), ch(384), 1, 3, same=True)
                self.d3b = BasicConv(ch(384), ch(384), 3, 1, same=True)
                self.pool = avg_pool()
                self.bp = BasicConv(cin, ch(192), 1, 1)

            def forward(self, x):
                b3 = self.b3(x)
                dbl = self.d2(self.d1(x))
                return torch.cat([self.b1(x), self.b3a(b3), self.b3b(b3), self.d3a(dbl), self.d3b(dbl),
                                  self.bp(self.pool(x))], dim=1)

        class Inception(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(
                    BasicConv(3, ch(32), 3, 3, stride=2), BasicConv(ch(32), ch(32), 3, 3),
                    BasicConv(ch(32), ch(64), 3, 3, same=True), max_pool(2),
                    BasicConv(ch(64), ch(80), 1, 1), BasicConv(ch(80), ch(192), 3, 3), max_pool(2),
                    inception_a(ch(192), ch(32)), inception_a(ch(256), ch(64)), inception_a(ch(288), ch(64)),
                    inception_b(ch(288)),
                    inception_c(ch(768), ch(128)), inception_c(ch(768), ch(160)), inception_c(ch(768), ch(160)),
                    inception_c(ch(768), ch(192)),
                    inception_d(ch(768)),
                    InceptionE(ch(1280)), InceptionE(ch(2048)))
                self.fc = nn.Linear(ch(2048), z["classes"])

            def forward(self, x):
                return self.fc(self.features(x).mean(dim=(2, 3)))

        model = Inception().to(memory_format=cl)
        x = torch.rand(z["batch"], 3, z["image"], z["image"], generator=g).contiguous(memory_format=cl)
        y = torch.randint(0, z["classes"], (z["batch"],), generator=g)
        return model, lambda: F.cross_entropy(model(x), y)

    if network == "rnnlm":
        v, u = z["vocab"], z["units"]

        class RNNLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embedding = nn.Embedding(v, u)
                self.lstm = nn.LSTM(u, u, num_layers=2, bias=False, batch_first=True)
                self.proj = nn.Linear(u, v, bias=False)

            def forward(self, ids):
                h, _ = self.lstm(self.embedding(ids))
                return self.proj(h)

        model = RNNLM()
        ids = torch.randint(0, v, (z["batch"], z["seq"]), generator=g)
        targets = torch.randint(0, v, (z["batch"], z["seq"]), generator=g)
        mask = torch.ones(z["batch"], z["seq"])  # the synthetic text has no padding

        def loss_fn():
            ce = F.cross_entropy(model(ids).reshape(-1, v), targets.reshape(-1), reduction="none")
            return (ce * mask.reshape(-1)).sum() / mask.sum()

        return model, loss_fn

    # The Transformer: encoder and decoder, post-norm, no biases anywhere but
    # the layer norms, no attention mask, no 1/sqrt(d_k) in the attention
    # logits (the example's wq and wk carry the scale).
    dm, h, dk, dff, layers = z["d_model"], z["heads"], z["d_k"], z["d_ff"], z["layers"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(dm, h * dk, bias=False) for _ in range(3))
            self.o = nn.Linear(h * dk, dm, bias=False)

        def forward(self, x, memory):
            b, l, m = x.shape[0], x.shape[1], memory.shape[1]
            q = self.q(x).view(b, l, h, dk).transpose(1, 2)
            k = self.k(memory).view(b, m, h, dk).transpose(1, 2)
            v = self.v(memory).view(b, m, h, dk).transpose(1, 2)
            att = F.scaled_dot_product_attention(q, k, v, dropout_p=DROPOUT if self.training else 0.0, scale=1.0)
            return self.o(att.transpose(1, 2).reshape(b, l, h * dk))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.wi = nn.Linear(dm, dff, bias=False)
            self.wo = nn.Linear(dff, dm, bias=False)
            self.dropout = nn.Dropout(DROPOUT)

        def forward(self, x):
            return self.wo(self.dropout(F.relu(self.wi(x))))

    def norm():
        return nn.LayerNorm(dm, eps=LAYER_NORM_EPSILON)

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.att, self.att_norm, self.ff, self.ff_norm = Attention(), norm(), FeedForward(), norm()

        def forward(self, x):
            x = self.att_norm(x + self.att(x, x))
            return self.ff_norm(x + self.ff(x))

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.att, self.att_norm, self.att2, self.att2_norm = Attention(), norm(), Attention(), norm()
            self.ff, self.ff_norm = FeedForward(), norm()

        def forward(self, y, memory):
            y = self.att_norm(y + self.att(y, y))
            y = self.att2_norm(y + self.att2(y, memory))
            return self.ff_norm(y + self.ff(y))

    # The example's constant table: sine on even channels, cosine on odd ones.
    p = torch.arange(z["seq"], dtype=torch.float64)[:, None]
    c = torch.arange(dm, dtype=torch.float64)[None, :]
    angle = p / torch.pow(10000.0, 2.0 * c / dm)
    positions = torch.where(c % 2 == 0, torch.sin(angle), torch.cos(angle)).float()

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embedding = nn.Embedding(z["src_vocab"], dm)
            self.tgt_embedding = nn.Embedding(z["tgt_vocab"], dm)
            self.encoder = nn.ModuleList(EncoderLayer() for _ in range(layers))
            self.decoder = nn.ModuleList(DecoderLayer() for _ in range(layers))
            self.projection = nn.Linear(dm, z["tgt_vocab"], bias=False)

        def forward(self, source, target):
            x = self.src_embedding(source) * math.sqrt(dm) + positions
            for layer in self.encoder:
                x = layer(x)
            y = self.tgt_embedding(target) * math.sqrt(dm) + positions
            for layer in self.decoder:
                y = layer(y, x)
            return self.projection(y)

    model = Transformer()
    source = torch.randint(0, z["src_vocab"], (z["batch"], z["seq"]), generator=g)
    target = torch.randint(0, z["tgt_vocab"], (z["batch"], z["seq"]), generator=g)  # the decoder's input and labels
    mask = torch.ones(z["batch"], z["seq"])

    def loss_fn():
        logits = model(source, target)
        ce = F.cross_entropy(logits.reshape(-1, z["tgt_vocab"]), target.reshape(-1), reduction="none")
        return (ce * mask.reshape(-1)).sum() / mask.sum()

    return model, loss_fn


def torch_step(torch, network):
    model, loss_fn = torch_model(torch, network)
    model.train()  # dropout on, as in the examples
    return peer_common.sgd_step(torch, model, loss_fn, LEARNING_RATE)


def main():
    args = parse_args()
    torch = peer_common.import_torch("the seed-network peer benchmark")
    if torch is None:
        return 0
    examples = find_examples(args.examples, args.network)

    peer_common.print_header(torch, f"{examples}/typemesh-NAME --devices 1 --strategy 0", args)
    for network in args.network:
        print(f"{network}: {' '.join(flags(network))}")
    peer_common.print_cell_rule(args)

    peer_common.print_table("network", args.network, describe, args, torch, torch_step,
                            lambda network, threads: typemesh_ms(examples, network, threads, args), "peer_seed.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
