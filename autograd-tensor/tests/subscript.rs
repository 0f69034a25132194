//! `x.index(idx![...])` against PyTorch's subscript semantics (the expected
//! values are what `x[...]` gives in PyTorch for `x = arange(24).reshape(2, 3, 4)`),
//! gradients against closed forms, and the errors.

use autograd_core::{Backend, DType};
use autograd_tensor::{Ellipsis, NewAxis, Tensor, TensorIndex, idx};

fn x<B: Backend>() -> Tensor<B> {
    Tensor::<B>::arange_dtype(0.0, 24.0, 1.0, DType::F64).reshape(&[2, 3, 4])
}

fn values<B: Backend>() {
    let x = x::<B>();
    let v = |t: Tensor<B>| (t.dims().to_vec(), t.to_vec::<f64>());
    assert_eq!(v(x.index(idx![1, 2])), (vec![4], vec![20.0, 21.0, 22.0, 23.0])); // x[1, 2]
    assert_eq!(v(x.index(idx![-1, -1, -1])), (vec![], vec![23.0])); // x[-1, -1, -1]
    assert_eq!(v(x.index(idx![.., 1..=2, 3])), (vec![2, 2], vec![7.0, 11.0, 19.0, 23.0])); // x[:, 1:3, 3]
    assert_eq!(v(x.index(idx![0, -2.., ..2])), (vec![2, 2], vec![4.0, 5.0, 8.0, 9.0])); // x[0, -2:, :2]
    assert_eq!(v(x.index(idx![0, 0, TensorIndex::step(.., 2)])), (vec![2], vec![0.0, 2.0])); // x[0, 0, ::2]
    assert_eq!(v(x.index(idx![0, 0, TensorIndex::step(1.., 2)])), (vec![2], vec![1.0, 3.0])); // x[0, 0, 1::2]
    assert_eq!(v(x.index(idx![0, 5..9])), (vec![0, 4], vec![])); // x[0, 5:9]: clamped, empty
    assert_eq!(x.index(idx![Ellipsis, 0]).dims(), &[2, 3]); // x[..., 0]
    assert_eq!(x.index(idx![NewAxis, .., Ellipsis, NewAxis]).dims(), &[1, 2, 3, 4, 1]); // x[None, :, ..., None]
    // Boolean masks: over all dims, and over trailing dims.
    let m = x.gt_scalar(20.0);
    assert_eq!(v(x.index(idx![&m])), (vec![3], vec![21.0, 22.0, 23.0])); // x[x > 20]
    let rows = Tensor::<B>::from_vec(vec![true, false, true], [3]);
    assert_eq!(x.index(idx![.., &rows]).dims(), &[2, 2, 4]); // x[:, tensor([True, False, True])]
    assert_eq!(x.index(idx![1, &rows, 0]).to_vec::<f64>(), vec![12.0, 20.0]); // x[1, rows, 0]
    // Integer index tensors, negative positions included, of any shape.
    let i = Tensor::<B>::from_vec(vec![2i64, -3, 2, 0], [2, 2]);
    assert_eq!(v(x.index(idx![0, 0, &i])), (vec![2, 2], vec![2.0, 1.0, 2.0, 0.0])); // x[0, 0, i]
    assert_eq!(x.index(idx![.., &i]).dims(), &[2, 2, 2, 4]); // x[:, i]
}

fn gradients<B: Backend>() {
    let w = x::<B>().requires_grad_(true);
    // Every element picked adds its upstream gradient; repeated picks accumulate.
    let i = Tensor::<B>::from_vec(vec![1i64, 1, 3], [3]);
    let y = w.index(idx![1, TensorIndex::step(.., 2), &i]);
    assert_eq!(y.dims(), &[2, 3]);
    (&y * 2.0).sum().backward().unwrap();
    let mut want = vec![0.0; 24];
    for r in [12, 20] {
        want[r + 1] = 4.0;
        want[r + 3] = 2.0;
    }
    assert_eq!(w.grad().unwrap().to_vec::<f64>(), want);
    // Through a mask: the gradient is the mask.
    let w = x::<B>().requires_grad_(true);
    let m = w.lt_scalar(3.0);
    w.index(idx![&m]).sum().backward().unwrap();
    let g = w.grad().unwrap().to_vec::<f64>();
    assert_eq!(g.iter().sum::<f64>(), 3.0);
    assert_eq!(&g[..4], &[1.0, 1.0, 1.0, 0.0]);
}

fn errors<B: Backend>() {
    let x = x::<B>();
    let e = |r: autograd_core::Result<Tensor<B>>| r.unwrap_err().to_string();
    assert!(e(x.try_index(idx![2])).contains("index 2 is out of bounds for dimension 0 with size 2"));
    assert!(e(x.try_index(idx![0, 0, 0, 0])).contains("too many indices"));
    assert!(e(x.try_index(idx![Ellipsis, 0, Ellipsis])).contains("single ellipsis"));
    assert!(e(x.try_index(idx![0, TensorIndex::step(.., 0)])).contains("step cannot be zero"));
    let bad_mask = Tensor::<B>::from_vec(vec![true, false], [2]);
    assert!(e(x.try_index(idx![0, &bad_mask])).contains("does not match"));
    let floats = Tensor::<B>::from_vec(vec![0.0f32], [1]);
    assert!(e(x.try_index(idx![&floats])).contains("Bool masks or I64"));
    let i = Tensor::<B>::from_vec(vec![0i64], [1]);
    assert!(e(x.try_index(idx![&i, &i])).contains("one tensor item"));
    assert!(e(x.try_index(idx![0, 0, &Tensor::<B>::from_vec(vec![4i64], [1])])).contains("out of bounds"));
    // The panicking form points at this file.
    let p = std::panic::catch_unwind(|| x.index(idx![7])).unwrap_err();
    assert!(p.downcast_ref::<String>().unwrap().contains(file!()));
}

autograd_testkit::for_backends!(values, gradients, errors);
