"""What bench/peer.py and bench/peer_seed.py share: importing PyTorch, the
run's header, typemesh's advice passed on, a PyTorch SGD step and its
timing, and the alternating rounds behind each table row."""

import datetime
import math
import os
import platform
import statistics
import sys
import time
import warnings


def import_torch(what):
    """PyTorch, or None after saying so (the benchmarks then have nothing to compare with)."""
    # A CPU-only run needs no NumPy; torch warns at import when it is absent.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError:
        print(f"PyTorch is not installed (pip install torch); {what} has nothing to compare with.")
        return None
    return torch


def add_timing_arguments(p):
    """--steps, --warmup, --rounds and --threads, as both benchmarks take them."""
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before them (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two systems per row (default 3)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")


def check_timing_arguments(p, a):
    """Refuses bad values of add_timing_arguments' flags; a.threads becomes a list of ints."""
    for name in ("steps", "rounds"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(a, name)}")
    if a.warmup < 0:
        p.error(f"--warmup must be at least 0, not {a.warmup}")
    try:
        a.threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        p.error(f"--threads wants numbers separated by commas, such as 1,2, not '{a.threads}'")
    if any(t < 1 for t in a.threads):
        p.error(f"--threads: every count must be at least 1, not {a.threads}")


def cpu_description():
    """The CPU's model and how its logical CPUs sit on physical cores (Linux;
    elsewhere the platform's processor name): two threads that share one core
    share its FMA units, which a 2-thread GEMM-bound step shows."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]  # the first CPU's entry
        fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in first.splitlines()))
        flags = fields.get("flags", "").split()
        vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
        model = (f"{fields.get('model name', model)} (family {fields.get('cpu family', '?')}, "
                 f"model {fields.get('model', '?')}, {vectors})")
    except OSError:
        pass
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()  # one sibling list per physical core
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            return model
    shared = "" if len(cores) == len(cpus) else " (hardware threads share a core)"
    return f"{model}, {len(cpus)} logical CPUs on {len(cores)} physical cores{shared}"


def print_header(torch, typemesh, args):
    """Date, command, machine and load, the libraries, how a cell is made."""
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores online, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"cpu: {cpu_description()}")
    print(f"torch {torch.__version__} (oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}, "
          f"MKL {'on' if torch.backends.mkl.is_available() else 'off'}); typemesh: {typemesh}")
    if os.environ.get("OPENBLAS_CORETYPE"):
        print(f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}")


_said = set()


def pass_on_advice(stderr):
    """Prints, once each, the lines a typemesh program wrote to standard error
    that start with 'typemesh:' (such as its advice on OpenBLAS's kernels),
    which the captured output would otherwise hide."""
    for line in stderr.splitlines():
        if line.startswith("typemesh:") and line not in _said:
            _said.add(line)
            print(line, file=sys.stderr)


def print_cell_rule(args):
    print(f"each cell: median over {args.rounds} rounds of the median of {args.steps} timed steps after "
          f"{args.warmup} warm-up steps; ratio = PyTorch time / typemesh time (> 1: typemesh faster); "
          f"ratio of means: the same from each run's mean step\n")


def sgd_step(torch, model, loss_fn, learning_rate):
    """One SGD training step of model on loss_fn(); returns the loss."""
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate)

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss.item()

    return train_step


def torch_ms(train_step, args, who):
    """(median, mean) ms of args.steps timed steps after args.warmup untimed ones."""
    for _ in range(args.warmup):
        train_step()
    times, loss = [], 0.0
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = train_step()
        times.append(1e3 * (time.perf_counter() - t0))
    if not math.isfinite(loss):
        sys.exit(f"{who}: PyTorch's last loss is not finite ({loss})")
    return statistics.median(times), statistics.fmean(times)


def alternate(rounds, ours, theirs):
    """Medians of ours() and theirs() over the rounds, alternating which goes
    first, so neither always runs on a machine the other has just warmed (or
    heated)."""
    a, b = [], []
    for r in range(rounds):
        if r % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    return a, b


def print_row(description, threads, ours, theirs, load_before):
    """A table row from the rounds' (median, mean) step times of each side."""
    t_ms, p_ms = (statistics.median(run[0] for run in side) for side in (ours, theirs))
    t_mean, p_mean = (statistics.median(run[1] for run in side) for side in (ours, theirs))
    print(f"| {description} | {threads} | {p_ms:.1f} | {t_ms:.1f} | {p_ms / t_ms:.2f} | {p_mean / t_mean:.2f} | "
          f"{load_before:.2f} → {os.getloadavg()[0]:.2f} |", flush=True)


def print_table(first_column, items, describe, args, torch, torch_step, typemesh_ms, who):
    """The table: for each item and thread count, PyTorch's step (torch_step(torch,
    item), from seed 1) against typemesh_ms(item, threads) (both give a run's
    median and mean step), alternating, the medians over args.rounds rounds,
    with the load before and after."""
    print(f"| {first_column} | threads | PyTorch ms | typemesh ms | ratio | ratio of means | "
          f"load (1 min) before → after |")
    print("|---|---|---|---|---|---|---|")
    for item in items:
        for threads in args.threads:
            torch.set_num_threads(threads)
            torch.manual_seed(1)
            train_step = torch_step(torch, item)
            load_before = os.getloadavg()[0]
            ours, theirs = alternate(args.rounds, lambda: typemesh_ms(item, threads),
                                     lambda: torch_ms(train_step, args, who))
            print_row(describe(item), threads, ours, theirs, load_before)
