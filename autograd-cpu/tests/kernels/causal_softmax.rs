//! The CPU's fused causal softmax returns the same bits as the composite it
//! replaces (scores masked with `-inf` by `where`, then the CPU softmax),
//! which is `Backend::causal_softmax`'s default: skipping the masked
//! exponentials changes the speed only. Shapes cross the parallel threshold
//! (the row index of each parallel chunk must be right) and include wide and
//! tall `L x S`, batch dims, a strided view and NaN/inf entries.

use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, HostData, Layout, Shape};
use autograd_cpu::Cpu;

fn composite(x: &<Cpu as Backend>::Storage, l: &Layout) -> Vec<f64> {
    let r = l.rank();
    let (rows, cols) = (l.dims()[r - 2], l.dims()[r - 1]);
    let keep: Vec<bool> = (0..rows * cols).map(|t| t % cols <= t / cols).collect();
    let mask = Cpu::from_host(HostData::Bool(keep));
    let lmask = Layout::contiguous(Shape::from([rows, cols])).broadcast_as(l.shape()).unwrap();
    let ninf = Cpu::full(&Shape::from([1]), f64::NEG_INFINITY, Cpu::dtype(x)).unwrap();
    let lninf = Layout::contiguous(Shape::from([1])).broadcast_as(l.shape()).unwrap();
    let filled = Cpu::where_select(&mask, &lmask, x, l, &ninf, &lninf).unwrap();
    let out = Layout::contiguous(l.shape().clone());
    Cpu::to_host(&Cpu::softmax(&filled, &out, r - 1).unwrap(), &out).unwrap().to_f64_vec()
}

#[test]
fn fused_causal_softmax_equals_the_masked_composite_bit_for_bit() {
    let mut g = Generator::new(3);
    for dtype in [DType::F32, DType::F64] {
        for dims in [vec![1, 1], vec![5, 3], vec![3, 5], vec![2, 3, 17, 40], vec![16, 4, 128, 128], vec![40, 7, 200]] {
            let shape = Shape::new(dims);
            let n = shape.numel();
            let mut v: Vec<f64> = (0..n + 3).map(|_| g.normal() * 4.0).collect();
            if n > 20 {
                v[4] = f64::NAN;
                v[11] = f64::INFINITY;
                v[19] = f64::NEG_INFINITY;
            }
            let x = Cpu::from_host(HostData::from_f64(&v, dtype));
            // a view at offset 3, and the same data transposed in its last two dims
            let plain = Layout::new(shape.clone(), Layout::contiguous(shape.clone()).strides().to_vec(), 3);
            let r = shape.rank();
            let swapped = Layout::contiguous(shape.clone()).transpose(r - 2, r - 1).unwrap();
            let swapped = Layout::new(swapped.shape().clone(), swapped.strides().to_vec(), 3);
            for l in [plain, swapped] {
                let out = Layout::contiguous(l.shape().clone());
                let fused = Cpu::to_host(&Cpu::causal_softmax(&x, &l).unwrap(), &out).unwrap().to_f64_vec();
                let want = composite(&x, &l);
                assert_eq!(fused.len(), want.len());
                for (i, (a, b)) in fused.iter().zip(&want).enumerate() {
                    assert!((a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(), "{dtype:?} {:?} [{i}]: {a} vs {b}", l.shape());
                }
            }
        }
    }
}
