"""PyTorch's side of `char_gpt --ranks 2 --zero 0|3`: the char_gpt step
(4 pre-norm causal blocks, 4 heads, width 128, context 128, 72 characters,
AdamW, clipping at 1) on 2 processes over gloo with 8 sequences each, under
DDP and under FSDP2 (`fully_shard` on each block, then on the root, as
`char_gpt --zero 3` wraps them). Prints each one's median step time and
the ratio, to compare with ours (benches/README.md, issue 33).

    python3 benches/fsdp_pytorch.py [steps] [threads per process]
        (needs torch: benches/compare_pytorch.py --setup)
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

V, D, L, H, T, B = 72, 128, 4, 4, 128, 8


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(D, H, 4 * D, 0.0, activation="gelu", batch_first=True, norm_first=True) for _ in range(L)]
        )
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T), persistent=False)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for b in self.blocks:
            h = b(h, src_mask=self.mask, is_causal=True)
        return self.head(self.ln_f(h))


def wrap(m, stage):
    if stage == "ddp":
        return torch.nn.parallel.DistributedDataParallel(m)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for b in m.blocks:
        fully_shard(b, mesh=mesh)
    return fully_shard(m, mesh=mesh)


def rank(r, world, port, steps, threads, out):
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=r, world_size=world)
    results = {}
    for stage in ["ddp", "fsdp", "ddp", "fsdp"]:  # alternating, the second round kept
        torch.manual_seed(0)
        m = wrap(Gpt(), stage)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
        g = torch.Generator().manual_seed(1 + r)
        x, y = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
        times = []
        for _ in range(steps + 2):
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            times.append(time.perf_counter() - t0)
        results[stage] = statistics.median(times[2:]) * 1e3
    if r == 0:
        out.put(results)
    dist.destroy_process_group()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    world = 2
    out = mp.get_context("spawn").SimpleQueue()
    port = 29500 + os.getpid() % 1000
    mp.spawn(rank, args=(world, port, steps, threads, out), nprocs=world, join=True)
    res = out.get()
    print(f"torch {torch.__version__}, {world} processes x {threads} threads, gloo, batch {B} per rank, {steps} steps")
    print(f"DDP  step {res['ddp']:.1f} ms")
    print(f"FSDP step {res['fsdp']:.1f} ms  ({res['fsdp'] / res['ddp']:.2f}x DDP)")


if __name__ == "__main__":
    main()
