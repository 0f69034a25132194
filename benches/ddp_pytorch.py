"""PyTorch's side of `cargo run --release -p benches --bin ddp`: the same
784-512-512-10 SGD step, batch 128 per rank, one rank on one thread, one
process on two threads (b128 and b256), and DDP over gloo with two
processes of one thread each. Prints median step times.

    python3 benches/ddp_pytorch.py [rounds]      (needs torch: benches/compare_pytorch.py --setup)
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPS = 15


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )


def step_ms(m, n, backward_only=False):
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 784, generator=g)
    y = torch.arange(n) % 10
    times = []
    for _ in range(REPS + 1):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        times.append((t2 - t1) if backward_only else (t3 - t0))
    return statistics.median(times[1:]) * 1e3


def rank(r, world, port, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=r, world_size=world)
    ddp = torch.nn.parallel.DistributedDataParallel(model())
    s = step_ms(ddp, 128)
    bd = step_ms(ddp, 128, backward_only=True)
    bp = step_ms(model(), 128, backward_only=True)
    buf = torch.ones(sum(p.numel() for p in ddp.parameters()))
    dist.barrier()
    ts = []
    for _ in range(REPS + 1):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        ts.append(time.perf_counter() - t0)
    ar = statistics.median(ts[1:]) * 1e3
    if r == 0:
        out.put((s, bd, bp, ar, buf.numel() * 4))
    dist.destroy_process_group()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ctx = mp.get_context("spawn")
    for i in range(rounds):
        torch.set_num_threads(1)
        one = step_ms(model(), 128)
        torch.set_num_threads(2)
        two128 = step_ms(model(), 128)
        two256 = step_ms(model(), 256)
        q = ctx.Queue()
        procs = [ctx.Process(target=rank, args=(r, 2, 29500 + i, q)) for r in range(2)]
        for p in procs:
            p.start()
        s, bd, bp, ar, nbytes = q.get()
        for p in procs:
            p.join()
        print(
            f"round {i}: torch 1 rank 1 thread b128 {one:.2f} ms; 2 threads b128 {two128:.2f} ms (speed-up {one / two128:.2f}x), "
            f"b256 {two256:.2f} ms; DDP gloo 2 ranks b128 {s:.2f} ms: {2 * one / s:.2f}x of 1 rank, {two256 / s:.2f}x of 2 threads b256; "
            f"backward DDP {bd:.2f} vs alone {bp:.2f} ms ({bd / bp:.2f}x); all-reduce {nbytes / 1e6:.2f} MB {ar:.3f} ms"
        )


if __name__ == "__main__":
    main()
