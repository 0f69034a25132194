"""PyTorch's times for the products `cargo run --release -p benches --bin
shapes gpt` times (the char_gpt step's linear layers, 2,048 tokens), at 1
and 2 threads, medians of 41 calls: `benches/.venv/bin/python
benches/gemm_shapes.py`."""
import torch

from compare_pytorch import median as median_secs


def main():
    torch.manual_seed(0)
    t = 2048
    print(f"{'product':<44} {'1 thr us':>10} {'GFLOP/s':>10} {'2 thr us':>10} {'GFLOP/s':>10}")
    for name, k, n in [("qkv", 128, 384), ("out", 128, 128), ("mlp up", 128, 512), ("mlp down", 512, 128), ("head", 128, 65)]:
        x, w, g = torch.randn(t, k), torch.randn(n, k), torch.randn(t, n)
        cases = [
            (f"{name} fwd x W^T [{t}x{k}]x[{k}x{n}]", lambda: x @ w.t()),
            (f"{name} bwd g W (dx)", lambda: g @ w),
            (f"{name} bwd g^T x (dW)", lambda: g.t() @ x),
        ]
        for label, f in cases:
            res = []
            for threads in (1, 2):
                torch.set_num_threads(threads)
                res.append(median_secs(41, f))
            gf = [2 * t * k * n / s / 1e9 for s in res]
            print(f"{label:<44} {res[0]*1e6:>10.1f} {gf[0]:>10.1f} {res[1]*1e6:>10.1f} {gf[1]:>10.1f}")


if __name__ == "__main__":
    main()
