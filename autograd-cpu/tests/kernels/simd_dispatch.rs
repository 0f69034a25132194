//! The kernels compiled per instruction set (`autograd_cpu::simd`) return
//! the same bits on every one this CPU has: the choice is speed only. Each
//! op runs on lengths around the vector widths, on the parallel path, on
//! broadcast rows, and on specials (NaN, infinities, signed zeros, huge
//! values); a CPU without AVX2 compares the baseline with itself only.
//!
//! One test function: `limit_isa` is process-wide (the other tests of this
//! binary may run under any cap: their results do not depend on it).

use autograd_core::rng::Generator;
use autograd_core::{Backend, BinaryOp, DType, HostData, Layout, Shape, UnaryOp};
use autograd_cpu::Cpu;
use autograd_cpu::simd::{Isa, detected_isa, limit_isa};

const SPECIALS: [f64; 8] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e30, -1e30, 88.5];

fn values(g: &mut Generator, n: usize, specials: bool) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|_| g.normal() * 3.0).collect();
    if specials {
        for (i, s) in SPECIALS.iter().enumerate() {
            if n > 0 {
                v[(i * 7919) % n] = *s;
            }
        }
    }
    v
}

/// Every output of every dispatched kernel, as `(label, values)`.
fn outputs(dtype: DType) -> Vec<(String, Vec<f64>)> {
    let mut g = Generator::new(7);
    let mut out = Vec::new();
    let host = |s: &<Cpu as Backend>::Storage, l: &Layout| Cpu::to_host(s, l).unwrap().to_f64_vec();
    // 20,000 passes the heavy ops' parallel threshold
    for n in [1usize, 15, 16, 17, 33, 255, 20_000] {
        for specials in [false, true] {
            let a = Cpu::from_host(HostData::from_f64(&values(&mut g, n, specials), dtype));
            let b = Cpu::from_host(HostData::from_f64(&values(&mut g, n, specials), dtype));
            let l = Layout::contiguous(Shape::from([n]));
            for &op in UnaryOp::ALL {
                out.push((format!("{op:?} n={n}"), host(&Cpu::unary(op, &a, &l).unwrap(), &l)));
            }
            for &op in BinaryOp::ALL {
                out.push((format!("{op:?} n={n}"), host(&Cpu::binary(op, &a, &l, &b, &l).unwrap(), &l)));
                // a row broadcast against columns: the kernels' (1, 0) and (0, 1) rows
                let rows = n.min(5);
                let (cols, bl) = (n / rows, Layout::new(Shape::from([rows, n / rows]), vec![1, 0], 0));
                let al = Layout::contiguous(Shape::from([rows, cols]));
                let ol = Layout::contiguous(Shape::from([rows, cols]));
                out.push((format!("{op:?} rows n={n}"), host(&Cpu::binary(op, &a, &al, &b, &bl).unwrap(), &ol)));
                out.push((format!("{op:?} rows' n={n}"), host(&Cpu::binary(op, &b, &bl, &a, &al).unwrap(), &ol)));
            }
            for rows in [1, 3] {
                let cols = n / rows;
                let l2 = Layout::contiguous(Shape::from([rows, cols]));
                out.push((format!("softmax {rows}x{cols}"), host(&Cpu::softmax(&a, &l2, 1).unwrap(), &l2)));
                out.push((format!("softmax dim 0 {rows}x{cols}"), host(&Cpu::softmax(&a, &l2, 0).unwrap(), &l2)));
                let (xhat, rstd) = Cpu::layer_norm(&a, &l2, 1, 1e-5).unwrap();
                out.push((format!("layer_norm {rows}x{cols}"), host(&xhat, &l2)));
                out.push((format!("rstd {rows}x{cols}"), host(&rstd, &Layout::contiguous(Shape::from([rows])))));
                let lr = Layout::contiguous(Shape::from([rows, 1]));
                let dx = Cpu::layer_norm_backward(&b, &l2, &xhat, &l2, &rstd, &lr, 1).unwrap();
                out.push((format!("layer_norm_backward {rows}x{cols}"), host(&dx, &l2)));
                let y = Cpu::softmax(&a, &l2, 1).unwrap();
                for log in [false, true] {
                    let dx = Cpu::softmax_backward(&y, &l2, &b, &l2, 1, log).unwrap();
                    out.push((format!("softmax_backward log={log} {rows}x{cols}"), host(&dx, &l2)));
                }
            }
        }
    }
    // fused attention, forward and backward: tiles and edges of the small
    // product (widths 32 and 33), the online softmax, a causal diagonal
    let spec = autograd_core::attention::AttentionSpec { scale: 0.3, causal: true, dropout: 0.0 };
    for (l, s, e) in [(70usize, 130usize, 33usize), (5, 9, 32)] {
        let up = |n: usize, g: &mut Generator| Cpu::from_host(HostData::from_f64(&values(g, n, false), dtype));
        let (q, k, v, dout) = (up(l * e, &mut g), up(s * e, &mut g), up(s * e, &mut g), up(l * e, &mut g));
        let (lq, lk) = (Layout::contiguous(Shape::from([l, e])), Layout::contiguous(Shape::from([s, e])));
        let (o, lse) = Cpu::attention(&[(&q, &lq), (&k, &lk), (&v, &lk)], spec).unwrap();
        let ll = Layout::contiguous(Shape::from([l]));
        out.push((format!("attention {l}x{s}x{e}"), host(&o, &lq)));
        out.push((format!("attention lse {l}x{s}x{e}"), host(&lse, &ll)));
        let grads = Cpu::attention_backward(&[(&q, &lq), (&k, &lk), (&v, &lk), (&o, &lq), (&lse, &ll), (&dout, &lq)], spec).unwrap();
        for (d, lay) in grads.iter().zip([&lq, &lk, &lk]) {
            out.push((format!("attention grad {l}x{s}x{e}"), host(d, lay)));
        }
    }
    out
}

fn same(x: f64, y: f64) -> bool {
    (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
}

#[test]
fn every_instruction_set_gives_the_same_bits() {
    let widest = detected_isa();
    for dtype in [DType::F32, DType::F64] {
        limit_isa(Isa::Baseline);
        let want = outputs(dtype);
        for isa in [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| i <= widest) {
            assert_eq!(limit_isa(isa), isa);
            let got = outputs(dtype);
            assert_eq!(got.len(), want.len());
            for ((label, g), (_, w)) in got.iter().zip(&want) {
                assert_eq!(g.len(), w.len(), "{label}");
                for (i, (&x, &y)) in g.iter().zip(w).enumerate() {
                    assert!(same(x, y), "{dtype:?} {label}[{i}]: {} under {isa:?}, {y} under the baseline", x);
                }
            }
        }
    }
    limit_isa(widest);
}
