//! `Tensor` <-> `ndarray::ArrayD` in every layout ndarray produces.

use autograd::prelude::*;
use ndarray::{s, ArrayD, IxDyn};

#[test]
fn round_trips_standard_sliced_and_transposed_arrays() {
    let a = ArrayD::from_shape_vec(IxDyn(&[3, 4]), (0..12).map(|i| i as f64).collect()).unwrap();
    // Standard layout, offset 0: the buffer is handed over.
    let t = Tensor::<Cpu>::from(a.clone());
    assert_eq!((t.dims(), t.dtype()), (&[3, 4][..], DType::F64));
    assert_eq!(t.to_ndarray::<f64>(), a);
    // Standard layout with an offset (rows 1..): only the logical elements.
    let rows = a.clone().slice_move(s![1.., ..]).into_dyn();
    assert!(rows.is_standard_layout());
    assert_eq!(Tensor::<Cpu>::from_ndarray(rows.clone()).to_ndarray::<f64>(), rows);
    // Non-standard layouts (transposed, strided columns) are copied in logical order.
    let tr = a.clone().reversed_axes();
    assert_eq!(Tensor::<Cpu>::from_ndarray(tr.clone()).to_vec::<f64>(), tr.iter().copied().collect::<Vec<_>>());
    let cols = a.slice(s![.., ..;2]).to_owned().into_dyn();
    assert_eq!(Tensor::<Cpu>::from_ndarray(cols.clone()).to_ndarray::<f64>(), cols);
    // Integers and 0-d arrays.
    let i = ArrayD::from_shape_vec(IxDyn(&[]), vec![7i64]).unwrap();
    let ti = Tensor::<Cpu>::from_ndarray(i.clone());
    assert_eq!((ti.rank(), ti.dtype()), (0, DType::I64));
    assert_eq!(ti.to_ndarray::<i64>(), i);
    // Out of a view: a transposed tensor comes out in its logical order.
    let tt = t.t();
    assert_eq!(tt.to_ndarray::<f64>(), a.t().to_owned().into_dyn());
}
