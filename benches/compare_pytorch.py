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

Usage:
  python3 benches/compare_pytorch.py [--sizes 256,512,1024,2048] [--only gemm,chain,optim,mlp,checkpoint] [--setup]

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

        for seg in (0, 4, 6, 8):
            out.append({"workload": "checkpoint_torch", "segments": seg, "ms": median(7, ck(seg)) * 1e3})
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
    return out, torch.__version__


def rust_results(sizes, families):
    rows = []
    if "checkpoint" in families:
        cmd = ["cargo", "run", "--quiet", "--release", "-p", "examples", "--example", "checkpoint_memory", "--", "--full", "--json"]
        res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        rows += [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    families = [f for f in families if f != "checkpoint"]
    if not families:
        return rows
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "benches", "--bin", "workloads", "--", ",".join(map(str, sizes)), ",".join(families)]
    res = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return rows + [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256,512,1024,2048")
    p.add_argument("--only", default="gemm,chain,optim,mlp,checkpoint")
    p.add_argument("--setup", action="store_true")
    args = p.parse_args()
    if args.setup:
        setup_and_reexec(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    families = args.only.split(",")
    rust = rust_results(sizes, families)
    torch, version = torch_results(sizes, families)
    key = lambda r: (r["workload"], r.get("n", 0), r.get("threads", 2))
    t = {key(r): r for r in torch}
    print(f"PyTorch {version} vs autograd (this workspace), same machine, {os.cpu_count()} CPUs")
    print(f"{'workload':<18} {'n':>5} {'thr':>3} {'ours':>10} {'pytorch':>10} {'ours/pytorch':>13}")
    ck_torch = {r["segments"]: r["ms"] for r in torch if r["workload"] == "checkpoint_torch"}
    ck_ours = [r for r in rust if r["workload"] == "checkpoint"]
    if ck_ours:
        none = ck_ours[0]
        print("checkpointing, 32 x Linear(1024)+ReLU, batch 256 (ours: peak activation MiB from the storage counters)")
        for r in ck_ours:
            print(f"  ours    {r['policy']:<16} {r['segments']:>2} segments {r['peak_mib']:>6.1f} MiB ({r['peak_mib'] / none['peak_mib']:.2f}x) {r['ms']:>7.1f} ms ({r['ms'] / none['ms']:.2f}x)")
        for seg, ms in ck_torch.items():
            print(f"  pytorch {'none' if seg == 0 else 'segments ' + str(seg):<16} {seg or 1:>2} segments {'':>14} {ms:>7.1f} ms ({ms / ck_torch[0]:.2f}x)")
    for r in rust:
        if r["workload"] == "checkpoint":
            continue
        if r["workload"] == "optim_step":
            for impl in ("foreach", "single", "fused"):
                o = t[(f"optim_step_{impl}", 0, 2)]
                print(f"{'adam 10M (' + impl + ')':<18} {'':>5} {2:>3} {r['ms']:>7.2f} ms {o['ms']:>7.2f} ms {o['ms'] / r['ms']:>10.2f}x faster")
            continue
        o = t[key(r)]
        if "ms" in r:
            print(f"{r['workload']:<18} {r['n']:>5} {r['threads']:>3} {r['ms']:>7.2f} ms {o['ms']:>7.2f} ms {o['ms'] / r['ms']:>10.2f}x faster")
        elif "gflops" in r:
            print(f"{r['workload']:<18} {r['n']:>5} {r['threads']:>3} {r['gflops']:>7.1f} GF {o['gflops']:>7.1f} GF {r['gflops'] / o['gflops']:>12.2f}x")
        else:
            print(f"{r['workload']:<18} {r['ops']:>5} {r['threads']:>3} {r['us_per_op']:>7.3f} us {o['us_per_op']:>7.3f} us {o['us_per_op'] / r['us_per_op']:>10.2f}x faster")


if __name__ == "__main__":
    main()
