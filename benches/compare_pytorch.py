#!/usr/bin/env python3
"""Side-by-side timings of this workspace and PyTorch on the same machine.

Workloads (the same in both):
  * f32 GEMM, square n x n, plain (A B) and transposed (A^T B, A B^T), 1 and 2 threads: GFLOP/s
  * a 1-element tensor through 2,000 chained ops (alternating * and + with
    constant 1-element tensors), forward + backward + reading the gradient:
    microseconds per op
  * optim_step: one Adam step over 10M f32 parameters in 100 tensors
    (PyTorch: foreach, the default on CPU tensors is single-tensor; all three
    implementations are timed), 2 threads: ms
  * checkpoint: forward + backward of 32 x (Linear(1024, 1024) + ReLU), batch
    256, f32, without checkpointing and with checkpoint_sequential at 4, 6, 8
    segments (PyTorch, use_reentrant=False) vs our policies (the
    `checkpoint_memory --full` example): ms and time relative to none; our
    peak activation memory comes from the storage counters
  * mlp_step: zero_grad + forward + cross-entropy + backward + SGD step of a
    784-512-512-10 ReLU MLP on a fixed batch of 16, 128, 1024, 2 threads: ms
  * delivery: the lessons' delivery-time regression (examples/data/
    bazarghar.safetensors, 2-16-1 ReLU MLP, f64), 300 full-batch gradient
    descent steps: ms, beside the same loop in NumPy written by hand
  * compile: trace-then-compile against eager, ours and PyTorch's
    (torch.compile of the step's forward and loss, backward through the
    compiled graph, the update eager: how PyTorch users compile a training
    step; inductor's caches in a fresh directory, so the first call is a
    cold compile, though later rounds reuse what the process compiled), for the 2,000-op chain, the delivery-time MLP (300 steps) and the
    784-512-512-10 MLP step at batch 16, 128, 1024: each side's compiled
    time / its own eager time, and the first compiled call (trace and
    compile) of each side; ours from `cargo run --release -p benches --bin
    compile_workloads`
  * cnn: one SGD training step at batch 32 of the digits_cnn example's
    LeNet-like network (8x8 inputs) and of a ResNet basic block (two 3x3
    Conv2d 64->64 + BatchNorm2d + ReLU + residual, 32x32 inputs, then global
    average pooling and a linear layer): ms
  * rnn: forward and backward (of the output's sum) of a 2-layer LSTM,
    input 128, hidden 256, 64 steps, batch 32: ms
  * gpt: one training step of the char_gpt example's model (4 pre-norm
    causal Transformer blocks, 4 heads, width 128, context 128, batch 16;
    AdamW, gradient clipping), ours from `char_gpt --json` (median of 20
    steps on the shipped corpus), PyTorch's from nn.TransformerEncoderLayer
    with the same shapes: ms

Every workload runs --rounds times, ours and PyTorch's alternating round by
round; the table gives the median of each side, the ratio of medians and the
spread (lowest to highest) of the per-round ratios, with the CPU's
instruction sets (the kernels are chosen at run time) and our allocations
per op and per step.

Usage:
  python3 benches/compare_pytorch.py [--sizes 256,512,1024,2048] [--only gemm,chain,optim,mlp,delivery,checkpoint,gpt,gpt_long,compile,amp,cnn,rnn] [--rounds 3] [--setup]
      [--json-out rounds.json] [--max-load 0.5] [--force]

--setup creates benches/.venv and installs torch and numpy into it (large
download, once); without it the script uses whatever `torch` the running
interpreter can import. Rust numbers come from `cargo run --release -p
benches --bin workloads`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")


def setup_and_reexec(args):
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "--quiet", "torch", "numpy"])
    argv = [a for a in sys.argv[1:] if a != "--setup"]
    os.execv(py, [py, os.path.abspath(__file__)] + argv)


def median(reps, f):
    f()
    ts = []
    for _ in range(reps):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return statistics.median(ts)


def torch_results(sizes, families):
    import torch

    out = []
    for threads in (1, 2) if "gemm" in families else ():
        torch.set_num_threads(threads)
        for n in sizes:
            torch.manual_seed(0)
            a, b = torch.randn(n, n), torch.randn(n, n)
            for kind, f in (("nn", lambda: a @ b), ("tn", lambda: a.t() @ b), ("nt", lambda: a @ b.t())):
                s = median(3 if n >= 2048 else 7, f)
                out.append({"workload": f"gemm_f32_{kind}", "n": n, "threads": threads, "gflops": 2 * n**3 / s / 1e9})
    for threads in (1, 2) if "amp" in families else ():
        # mixed precision: bf16/f16 products and the MLP step under CPU autocast
        torch.set_num_threads(threads)
        for n in sizes:
            torch.manual_seed(0)
            a, b = torch.randn(n, n), torch.randn(n, n)
            for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
                x, y = a.to(dt), b.to(dt)
                s = median(3 if n >= 2048 else 7, lambda: x @ y)
                out.append({"workload": f"gemm_{name}_amp", "n": n, "threads": threads, "gflops": 2 * n**3 / s / 1e9})
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
        opt = torch.optim.SGD(mlp.parameters(), lr=0.01)
        xb, yb = torch.randn(128, 784), torch.arange(128) % 10
        for name, dt in (("f32", None), ("bf16", torch.bfloat16), ("f16", torch.float16)):

            def step(dt=dt):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=dt or torch.bfloat16, enabled=dt is not None):
                    loss = torch.nn.functional.cross_entropy(mlp(xb), yb)
                loss.backward()
                opt.step()

            out.append({"workload": f"mlp_step_{name}_amp", "n": 128, "threads": threads, "ms": median(9, step) * 1e3})
    for threads in (1, 2) if "chain" in families else ():
        torch.set_num_threads(threads)

        def chain(n=2000):
            x = torch.ones(1, requires_grad=True)
            c1, c2 = torch.tensor([1.0001]), torch.tensor([0.5])
            y = x
            for i in range(n):
                y = y * c1 if i % 2 == 0 else y + c2
            y.sum().backward()
            return x.grad[0].item()

        s = median(21, chain)
        out.append({"workload": "autograd_chain", "ops": 2000, "threads": threads, "us_per_op": s / 2000 * 1e6})
    torch.set_num_threads(2)
    if "optim" in families:
        torch.manual_seed(0)
        ps = [torch.randn(100_000, requires_grad=True) for _ in range(100)]
        for p in ps:
            p.grad = torch.randn(100_000)
        for impl in ("foreach", "single", "fused"):
            kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
            opt = torch.optim.Adam(ps, lr=1e-3, **kw)
            out.append({"workload": f"optim_step_{impl}", "threads": 2, "ms": median(11, opt.step) * 1e3})
    if "checkpoint" in families:
        from torch.utils.checkpoint import checkpoint_sequential

        torch.manual_seed(0)
        nn = torch.nn
        model = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(32)])
        x = torch.randn(256, 1024)

        def ck(seg):
            def run():
                for p in model.parameters():
                    p.grad = None
                y = model(x) if seg == 0 else checkpoint_sequential(model, seg, x, use_reentrant=False)
                y.sum().backward()

            return run

        # the segment counts take turns, one step each per round, as ours do
        runs = {seg: ck(seg) for seg in (0, 4, 6, 8)}
        ts = {seg: [] for seg in runs}
        for f in runs.values():
            f()
        for _ in range(7):
            for seg, f in runs.items():
                s = time.perf_counter()
                f()
                ts[seg].append(time.perf_counter() - s)
        for seg, t in ts.items():
            out.append({"workload": "checkpoint_torch", "segments": seg, "ms": statistics.median(t) * 1e3})
    if "mlp" in families:
        for b in (16, 128, 1024):
            torch.manual_seed(0)
            nn = torch.nn
            m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            opt = torch.optim.SGD(m.parameters(), lr=0.01)
            x, y = torch.randn(b, 784), torch.arange(b) % 10

            def step():
                opt.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(m(x), y)
                loss.backward()
                opt.step()
                return loss.item()

            out.append({"workload": "mlp_step", "n": b, "threads": 2, "ms": median(21 if b >= 1024 else 101, step) * 1e3})
    if "cnn" in families:
        out += cnn_results(torch)
    if "rnn" in families:
        torch.set_num_threads(2)
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(128, 256, num_layers=2)
        x = torch.randn(64, 32, 128, requires_grad=True)

        def lstm_step():
            lstm.zero_grad(set_to_none=True)
            s = lstm(x)[0].sum()
            s.backward()
            return s.item()

        out.append({"workload": "lstm_step", "n": 64, "threads": 2, "ms": median(5, lstm_step) * 1e3})
    if "gpt" in families:
        out += gpt_results(torch)
    if "gpt_long" in families:
        out += gpt_results(torch, steps=10, T=512, B=4)
    if "delivery" in families:
        out += delivery_results(torch)
    return out, torch.__version__


def cnn_results(torch):
    """The LeNet digits step and a ResNet basic block step, batch 32, SGD."""
    nn = torch.nn
    torch.set_num_threads(2)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(h)) + x)

    lenet = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    resnet = nn.Sequential(Block(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    out = []
    for name, m, x, reps in [("lenet_step", lenet, torch.rand(32, 64), 101), ("resnet_block_step", resnet, torch.randn(32, 64, 32, 32), 11)]:
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        y = torch.arange(32) % 10

        def step(m=m, opt=opt, x=x, y=y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        out.append({"workload": name, "n": 32, "threads": 2, "ms": median(reps, step) * 1e3})
    return out


def gpt_results(torch, steps=20, T=128, B=16):
    """The char_gpt example's training step in eager PyTorch: the same shapes
    (4 pre-norm causal blocks, 4 heads, width 128, context T (128), batch B
    (16), 72 characters), AdamW, gradient clipping; median step time."""
    nn = torch.nn
    V, D, L, H = 72, 128, 4, 4
    torch.set_num_threads(2)
    torch.manual_seed(0)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList(
                [nn.TransformerEncoderLayer(D, H, 4 * D, 0.0, activation="gelu", batch_first=True, norm_first=True) for _ in range(L)]
            )
            self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, V)
            self.mask = nn.Transformer.generate_square_subsequent_mask(T)

        def forward(self, x):
            h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            for b in self.blocks:
                h = b(h, src_mask=self.mask, is_causal=True)
            return self.head(self.ln_f(h))

    m = Gpt()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    return [{"workload": "gpt_step", "n": B, "context": T, "threads": 2, "policy": "none", "ms": median(steps, step) * 1e3}]


def load_safetensors_numpy(path):
    """The tensors of a safetensors file as NumPy arrays (F64/F32 only)."""
    import numpy as np

    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    kinds = {"F64": np.float64, "F32": np.float32}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=kinds[meta["dtype"]]).reshape(meta["shape"]).copy()
    return out


def delivery_results(torch):
    """300 full-batch GD steps of the 2-16-1 delivery-time MLP, f64, in PyTorch and in NumPy by hand."""
    import numpy as np

    d = load_safetensors_numpy(os.path.join(ROOT, "examples", "data", "bazarghar.safetensors"))
    X, y = torch.from_numpy(d["X"]), torch.from_numpy(d["y"])

    def torch_run(steps=300):
        w = [torch.from_numpy(d[k].copy()).requires_grad_(True) for k in ("W1", "b1", "W2", "b2")]
        for _ in range(steps):
            for p in w:
                p.grad = None
            loss = ((torch.relu(X @ w[0] + w[1]) @ w[2] + w[3] - y) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in w:
                    p -= 0.1 * p.grad
        return loss.item()

    def numpy_run(steps=300):
        W1, b1, W2, b2 = (d[k].copy() for k in ("W1", "b1", "W2", "b2"))
        Xn, yn = d["X"], d["y"]
        for _ in range(steps):
            z = Xn @ W1 + b1
            h = np.maximum(z, 0.0)
            r = h @ W2 + b2 - yn
            g = 2.0 * r / r.size
            gW2, gb2 = h.T @ g, g.sum(0)
            gz = (g @ W2.T) * (z > 0)
            gW1, gb1 = Xn.T @ gz, gz.sum(0)
            W1 -= 0.1 * gW1
            b1 -= 0.1 * gb1
            W2 -= 0.1 * gW2
            b2 -= 0.1 * gb2
        return float((r**2).mean())

    return [
        {"workload": "delivery_300", "n": 300, "threads": 2, "ms": median(21, torch_run) * 1e3},
        {"workload": "delivery_300_numpy", "n": 300, "threads": 2, "ms": median(21, numpy_run) * 1e3},
    ]


def compile_results(torch, rounds):
    """Eager vs torch.compile on the compile family's workloads: per-step
    ms (median), and the first compiled call in ms (a fresh compile each
    round: torch._dynamo.reset())."""
    import numpy as np

    nn = torch.nn
    rows = []

    def timed(f):
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1e3

    def measure(name, n, make, steps, reps):
        # make(compiled) returns a step function; eager and compiled alike
        eager = make(False)
        eager_ms = median(reps, lambda: [eager() for _ in range(steps)]) * 1e3 / steps
        firsts, comp = [], []
        for _ in range(rounds):
            torch._dynamo.reset()
            step = make(True)
            firsts.append(timed(step))
            comp.append(median(reps, lambda: [step() for _ in range(steps)]) * 1e3 / steps)
        rows.append({"workload": name, "n": n, "eager_ms": eager_ms, "compiled_ms": statistics.median(comp), "first_call_ms": statistics.median(firsts)})

    def chain_maker(compiled):
        c1, c2 = torch.tensor([1.0001]), torch.tensor([0.5])

        def fwd(x):
            y = x
            for i in range(2000):
                y = y * c1 if i % 2 == 0 else y + c2
            return y.sum()

        f = torch.compile(fwd) if compiled else fwd

        def step():
            x = torch.tensor([1.0], requires_grad=True)
            f(x).backward()
            return x.grad.item()

        return step

    measure("compile_chain", 2000, chain_maker, 1, 11)

    d = load_safetensors_numpy(os.path.join(ROOT, "examples", "data", "bazarghar.safetensors"))
    X, y = torch.from_numpy(d["X"]), torch.from_numpy(d["y"])

    def delivery_maker(compiled):
        w = [torch.from_numpy(d[k].copy()).requires_grad_(True) for k in ("W1", "b1", "W2", "b2")]

        def loss_fn(w0, w1, w2, w3):
            return ((torch.relu(X @ w0 + w1) @ w2 + w3 - y) ** 2).mean()

        f = torch.compile(loss_fn) if compiled else loss_fn

        def step():
            for p in w:
                p.grad = None
            loss = f(*w)
            loss.backward()
            with torch.no_grad():
                for p in w:
                    p -= 0.1 * p.grad
            return loss.item()

        return step

    measure("compile_delivery", 300, delivery_maker, 300, 5)

    for b in (16, 128, 1024):
        def mlp_maker(compiled, b=b):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            opt = torch.optim.SGD(m.parameters(), lr=0.01)
            x, t = torch.randn(b, 784), torch.arange(b) % 10

            def loss_fn(x, t):
                return nn.functional.cross_entropy(m(x), t)

            f = torch.compile(loss_fn) if compiled else loss_fn

            def step():
                opt.zero_grad(set_to_none=True)
                loss = f(x, t)
                loss.backward()
                opt.step()
                return loss.item()

            return step

        measure("compile_mlp", b, mlp_maker, 1, 21 if b >= 1024 else 51)
    return rows


def print_compile_table(rust_rounds, torch_rows):
    print("trace-then-compile: each side's compiled step / its own eager step, and the first compiled call")
    print(f"{'workload':<18} {'n':>5} {'ours eager':>11} {'compiled':>10} {'ratio':>7} {'first call':>11} | {'torch eager':>11} {'compiled':>10} {'ratio':>7} {'first call':>11} | first calls ours/torch")
    for t in torch_rows:
        k = (t["workload"], t["n"])
        ours = [r[k] for r in rust_rounds if k in r]
        if not ours:
            continue
        oe = statistics.median([o["eager_ms"] for o in ours])
        oc = statistics.median([o["compiled_ms"] for o in ours])
        of = statistics.median([o["first_call_ms"] for o in ours])
        ratios = [o["compiled_ms"] / o["eager_ms"] for o in ours]
        print(
            f"{t['workload']:<18} {t['n']:>5} {oe:>8.3f} ms {oc:>7.3f} ms {oc / oe:>6.2f}x {of:>8.2f} ms | {t['eager_ms']:>8.3f} ms {t['compiled_ms']:>7.3f} ms "
            f"{t['compiled_ms'] / t['eager_ms']:>6.2f}x {t['first_call_ms']:>8.0f} ms | {of / t['first_call_ms']:.5f} (ours per round {spread(ratios)})"
        )


def cpu_flags():
    """The instruction sets the kernels choose between, as /proc/cpuinfo lists them."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return "unknown CPU"
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    want = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile"]
    return f"{model}; " + " ".join(f for f in want if f in flags) + f"; {os.cpu_count()} CPUs"


def rust_results(sizes, families):
    rows = []
    if "checkpoint" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "examples", "--example", "checkpoint_memory", "--", "--full", "--json"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if "gpt" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "examples", "--example", "char_gpt", "--", "--steps", "21", "--checkpoint", "none,sqrt", "--json"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if "gpt_long" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "examples", "--example", "char_gpt", "--", "--steps", "11", "--context", "512", "--batch", "4", "--json"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if "compile" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "benches", "--bin", "compile_workloads"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if "amp" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "benches", "--bin", "low_precision", "--", ",".join(map(str, sizes)), "--json"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    families = [f for f in families if f not in ("checkpoint", "gpt", "gpt_long", "compile", "amp")]
    if not families:
        return rows
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "benches", "--bin", "workloads", "--", ",".join(map(str, sizes)), ",".join(families)]
    res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return rows + [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]


def spread(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256,512,1024,2048")
    p.add_argument("--only", default="gemm,chain,optim,mlp,delivery,checkpoint,gpt,compile")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--setup", action="store_true")
    p.add_argument("--json-out", help="also write every round's raw rows (ours and PyTorch's) to this JSON file")
    p.add_argument("--max-load", type=float, default=0.5, help="refuse to measure above this 1-minute load average")
    p.add_argument("--force", action="store_true", help="measure on a loaded machine anyway (the report says so)")
    args = p.parse_args()
    if args.setup:
        setup_and_reexec(args)
    loads = []

    def check_load(when):
        # PyTorch's OpenMP threads slow down tenfold beside a build: a
        # ratio measured on a busy machine says nothing
        load = os.getloadavg()[0]
        loads.append(load)
        if load > args.max_load:
            msg = f"load average {load:.2f} above {args.max_load} {when}: the ratios would measure the other processes"
            if not args.force:
                sys.exit(f"refusing to measure: {msg} (wait, or pass --force)")
            print(f"WARNING: {msg}", file=sys.stderr)

    check_load("before the first round")
    sizes = [int(s) for s in args.sizes.split(",")]
    families = args.only.split(",")
    key = lambda r: (r["workload"], r.get("n", 0), r.get("threads", 2), r.get("policy", r.get("segments", "")))
    rust_rounds, torch_rounds = [], []
    raw = []
    for r in range(args.rounds):
        if r > 0:
            check_load(f"before round {r + 1}")
        ours = rust_results(sizes, families)
        rust_rounds.append({key(x): x for x in ours})
        t, version = torch_results(sizes, families)
        torch_rounds.append({key(x): x for x in t})
        raw.append({"round": r + 1, "load_average": os.getloadavg()[0], "ours": ours, "pytorch": t})
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"pytorch": version, "cpu": cpu_flags(), "isa_cap": os.environ.get("AUTOGRAD_CPU_ISA"), "rounds": raw}, f, indent=1)
    print(f"PyTorch {version} vs autograd (this workspace), same machine, {args.rounds} rounds alternating")
    print(f"CPU: {cpu_flags()}; AUTOGRAD_CPU_ISA={os.environ.get('AUTOGRAD_CPU_ISA', 'unset')}; load average {min(loads):.2f}-{max(loads):.2f}")
    if "compile" in families:
        # A cold torch.compile: inductor's on-disk caches (FX graphs, compiled
        # C++) in a fresh directory, not the warm one a previous run left.
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
        import torch

        torch.set_num_threads(2)
        ck_rounds = [{(x["workload"], x["n"]): x for x in r.values() if x["workload"].startswith("compile_")} for r in rust_rounds]
        print_compile_table(ck_rounds, compile_results(torch, args.rounds))
        for r in rust_rounds:
            for k in [k for k in r if k[0].startswith("compile_")]:
                del r[k]

    def metric(x):
        for m in ("ms", "gflops", "us_per_op"):
            if m in x:
                return m
        return None

    def values(rounds, k, m):
        return [r[k][m] for r in rounds if k in r and m in r[k]]

    ck = [k for k in rust_rounds[0] if k[0] == "checkpoint"]
    if ck:
        none = [k for k in ck if rust_rounds[0][k]["policy"] == "none"][0]
        print("checkpointing, 32 x Linear(1024)+ReLU, batch 256 (ours: peak activation MiB from the storage counters); time vs none, median of rounds [spread]")
        for k in ck:
            x = rust_rounds[0][k]
            rel = [r[k]["ms"] / r[none]["ms"] for r in rust_rounds]
            print(f"  ours    {x['policy']:<16} {x['segments']:>2} segments {x['peak_mib']:>6.1f} MiB ({x['peak_mib'] / rust_rounds[0][none]['peak_mib']:.2f}x) {statistics.median(values(rust_rounds, k, 'ms')):>7.1f} ms {statistics.median(rel):.2f}x [{spread(rel)}]")
        tk = sorted([k for k in torch_rounds[0] if k[0] == "checkpoint_torch"], key=lambda k: k[3])
        for k in tk:
            seg = k[3]
            rel = [r[k]["ms"] / r[tk[0]]["ms"] for r in torch_rounds]
            print(f"  pytorch {'none' if seg == 0 else 'segments ' + str(seg):<16} {seg or 1:>2} segments {'':>14} {statistics.median(values(torch_rounds, k, 'ms')):>7.1f} ms {statistics.median(rel):.2f}x [{spread(rel)}]")
    print(f"{'workload':<20} {'n':>5} {'thr':>3} {'ours':>11} {'pytorch':>11} {'ours/pytorch time':>18} {'spread':>10}  allocations")
    gk = sorted(k for k in rust_rounds[0] if k[0] == "gpt_step")
    for k in gk:
        if k[3] != "none":
            base = (k[0], k[1], k[2], "none")
            rel = [r[k]["ms"] / r[base]["ms"] for r in rust_rounds if base in r]
            pk = [r[k]["peak_mib"] / r[base]["peak_mib"] for r in rust_rounds if base in r]
            print(f"gpt_step batch {k[1]} --checkpoint {k[3]} vs none (ours): time {statistics.median(rel):.2f}x [{spread(rel)}], peak activations {statistics.median(pk):.2f}x")
    for k, x in rust_rounds[0].items():
        if k[0] == "checkpoint":
            continue
        m = metric(x)
        if m is None:
            # a row without a time or a rate (a count, a setting): nothing to divide
            continue
        allocs = f"{x['allocs_per_op']:.2f}/op" if "allocs_per_op" in x else (f"{x['allocs_per_step']}/step" if "allocs_per_step" in x else "")
        if k[0] == "optim_step":
            for impl in ("foreach", "single", "fused"):
                tkey = (f"optim_step_{impl}", 0, 2, "")
                ours, theirs = values(rust_rounds, k, "ms"), values(torch_rounds, tkey, "ms")
                ratios = [a / b for a, b in zip(ours, theirs)]
                print(f"{'adam 10M (' + impl + ')':<20} {'':>5} {2:>3} {statistics.median(ours):>8.2f} ms {statistics.median(theirs):>8.2f} ms {statistics.median(ours) / statistics.median(theirs):>17.2f}x {spread(ratios):>10}")
            continue
        ours, theirs = values(rust_rounds, k, m), values(torch_rounds, k, m)
        if not theirs:
            continue
        # time ratios (ours / PyTorch); for GEMM, GFLOP/s ours / PyTorch
        ratios = [a / b for a, b in zip(ours, theirs)]
        mo, mt = statistics.median(ours), statistics.median(theirs)
        unit = {"ms": "ms", "gflops": "GF", "us_per_op": "us"}[m]
        label = "GFLOP/s ratio" if m == "gflops" else ""
        print(f"{k[0]:<20} {k[1]:>5} {k[2]:>3} {mo:>8.3f} {unit} {mt:>8.3f} {unit} {mo / mt:>17.2f}x {spread(ratios):>10}  {allocs}{label}")
        if k[0] == "delivery_300":
            npk = ("delivery_300_numpy", 300, 2, "")
            nv = values(torch_rounds, npk, "ms")
            nr = [a / b for a, b in zip(ours, nv)]
            print(f"{'  vs NumPy by hand':<20} {'':>5} {'':>3} {mo:>8.3f} ms {statistics.median(nv):>8.3f} ms {mo / statistics.median(nv):>17.2f}x {spread(nr):>10}")


if __name__ == "__main__":
    main()
