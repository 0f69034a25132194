//! `Bool` and `I64` as PyTorch has them: comparisons give booleans, masks
//! select, integers add and multiply (wrapping), divide as floats, and Rust
//! scalars of every numeric type promote as PyTorch's scalars do.

use autograd_core::{Backend, DType};
use autograd_tensor::{Tensor, load_safetensors_bytes};
use std::collections::HashMap;

fn comparisons_are_bool<B: Backend>() {
    let x = Tensor::<B>::from_vec(vec![-1.0f32, 0.0, 2.0, f32::NAN], [4]);
    let m = x.gt_scalar(0.0);
    assert_eq!(m.dtype(), DType::Bool);
    assert_eq!(m.to_vec::<bool>(), vec![false, false, true, false]);
    assert!(!m.requires_grad());
    assert_eq!(x.ne(&x).to_vec::<bool>(), vec![false, false, false, true]); // NaN != NaN
    // A boolean mask selects, counts into int64 and negates.
    assert_eq!(x.masked_fill(&m, 9.0).to_vec::<f32>()[..3], [-1.0, 0.0, 9.0]);
    let picked = Tensor::where_cond(&m, &x, &x.zeros_like()).to_vec::<f32>();
    assert_eq!(picked[..3], [0.0, 0.0, 2.0]);
    let count = m.sum();
    assert_eq!((count.dtype(), count.to_vec::<i64>()), (DType::I64, vec![1]));
    assert_eq!(m.logical_not().to_vec::<bool>(), vec![true, true, false, true]);
    // Bool in arithmetic promotes to the other operand's dtype.
    let finite = x.masked_fill(&x.ne(&x), 0.0);
    assert_eq!((&finite * &m).to_vec::<f32>(), vec![-0.0, 0.0, 2.0, 0.0]);
    // NaN casts to true, as in PyTorch.
    assert_eq!(x.to_dtype(DType::Bool).to_vec::<bool>(), vec![true, false, true, true]);
}

fn bool_tensors_move_like_any_other<B: Backend>() {
    let m = Tensor::<B>::from_vec(vec![true, false, true, true, false, false], [2, 3]);
    assert_eq!(m.t().contiguous().to_vec::<bool>(), vec![true, true, false, false, true, false]);
    let idx = Tensor::<B>::from_vec(vec![1i64, 0], [2]);
    assert_eq!(m.index_select(0, &idx).to_vec::<bool>(), vec![true, false, false, true, false, true]);
    assert_eq!(Tensor::cat(&[m.clone(), m.clone()], 0).dims(), &[4, 3]);
    // Through safetensors as BOOL, one byte each.
    let path = std::env::temp_dir().join(format!("bool-{}-{}.safetensors", std::process::id(), std::any::type_name::<B>().len()));
    autograd_tensor::save_safetensors(&[("mask", &m)], &HashMap::new(), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let back = load_safetensors_bytes::<B>(&bytes, "mask.safetensors").unwrap();
    assert_eq!(back.tensors[0].1.dtype(), DType::Bool);
    assert_eq!(back.tensors[0].1.to_vec::<bool>(), m.to_vec::<bool>());
}

fn integer_arithmetic<B: Backend>() {
    let a = Tensor::<B>::from_vec(vec![1i64, -2, 3, i64::MAX], [4]);
    let b = Tensor::<B>::from_vec(vec![4i64, 5, -6, 1], [4]);
    let s = &a + &b;
    assert_eq!((s.dtype(), s.to_vec::<i64>()), (DType::I64, vec![5, 3, -3, i64::MIN])); // wraps, as PyTorch
    assert_eq!((&a * &b).to_vec::<i64>()[..3], [4, -10, -18]);
    assert_eq!((&a - 1).to_vec::<i64>()[..3], [0, -3, 2]);
    assert_eq!((10 - &a).to_vec::<i64>()[..3], [9, 12, 7]);
    assert_eq!((&a * 2u8).dtype(), DType::I64);
    // True division: integers divide as float32.
    let q = &a.narrow(0, 0, 3) / &b.narrow(0, 0, 3);
    assert_eq!((q.dtype(), q.to_vec::<f32>()), (DType::F32, vec![0.25, -0.4, -0.5]));
    // A float scalar lifts integers to float32; an integer scalar never widens a float tensor.
    assert_eq!((&a.narrow(0, 0, 3) * 0.5).to_vec::<f32>(), vec![0.5, -1.0, 1.5]);
    let x = Tensor::<B>::ones_dtype([2], DType::F64);
    assert_eq!((&x * 3i32).dtype(), DType::F64);
    assert_eq!((&x + 1.5f32).to_vec::<f64>(), vec![2.5, 2.5]);
    assert_eq!((2.0 * &x).to_vec::<f64>(), vec![2.0, 2.0]);
    // Mixed integer/float tensors promote like PyTorch; a negative tensor
    // exponent gives PyTorch's elementwise answer (1 for 1, ±1 for -1, else 0).
    assert_eq!((&a.narrow(0, 0, 2) + &x).dtype(), DType::F64);
    assert_eq!(a.pow(&Tensor::from_vec(vec![-1i64], [1])).to_vec::<i64>(), vec![1, 0, 0, 0]);
    assert_eq!(a.narrow(0, 0, 3).pow(&Tensor::from_vec(vec![2i64], [1])).to_vec::<i64>(), vec![1, 4, 9]);
}

autograd_testkit::for_backends!(comparisons_are_bool, bool_tensors_move_like_any_other, integer_arithmetic);
