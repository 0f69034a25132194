//! Fused attention against the math path, forward plus backward, f32,
//! interleaved in one process on the char_gpt shapes (batch x heads 64,
//! head width 32, causal) at context 128 and 512:
//! `cargo run --release -p benches --bin attention [rounds]`.
//! Prints the median time of each and the ratio (math / fused), the rate
//! of the fused path in GFLOP/s of the multiply-adds it does, and the peak
//! of live storage over one forward and backward of each.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use autograd_tensor::functional::{SdpaOptions, try_scaled_dot_product_attention, try_scaled_dot_product_attention_math};
use benches::{median_secs, with_threads};

fn main() {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse().expect("rounds")).unwrap_or(3);
    println!("isa {:?}", autograd_cpu::simd::active_isa());
    for (batch, len) in [(16usize, 128usize), (4, 512)] {
        let heads = 4;
        let leaf = || Tensor::<Cpu>::randn([batch, heads, len, 32]).requires_grad_(true);
        let (q, k, v) = (leaf(), leaf(), leaf());
        let o = SdpaOptions { is_causal: true, ..Default::default() };
        let step = |fused: bool| {
            let y =
                if fused { try_scaled_dot_product_attention(&q, &k, &v, o) } else { try_scaled_dot_product_attention_math(&q, &k, &v, o) };
            y.expect("attention").sum().backward().expect("backward");
        };
        // causal: about half of the L x S scores; 2 products forward, 5 backward (scores recomputed)
        let flops = 2.0 * 7.0 * (batch * heads) as f64 * (len * len) as f64 / 2.0 * 32.0;
        let peak = |fused: bool| {
            autograd_core::memory::reset_peak();
            let before = autograd_core::memory::live_bytes();
            step(fused);
            (autograd_core::memory::peak_bytes() - before) as f64 / (1 << 20) as f64
        };
        let (pf, pm) = (peak(true), peak(false));
        let (mut f, mut m) = (vec![], vec![]);
        for _ in 0..rounds {
            with_threads(2, || {
                f.push(median_secs(9, || step(true)));
                m.push(median_secs(9, || step(false)));
            });
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            v[v.len() / 2]
        };
        let (tf, tm) = (med(&mut f), med(&mut m));
        println!(
            "batch {batch} heads {heads} L=S={len} E=32 causal, 2 threads: fused {:.2} ms ({:.1} GFLOP/s, peak {pf:.1} MiB), math path {:.2} ms (peak {pm:.1} MiB), math/fused {:.2}x",
            tf * 1e3,
            flops / tf / 1e9,
            tm * 1e3,
            tm / tf
        );
    }
}
