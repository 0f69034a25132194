//! The backend's primitives as data: one table, [`crate::for_each_primitive!`],
//! from which everything that must know every primitive is generated.
//!
//! A call of a [`Backend`] primitive, with everything but its buffers, is a
//! [`Primitive`] value (burn-ir's "describing work as data"): a recorder
//! keeps it, a replay [`Primitive::run`]s it on any backend, a printer
//! prints it, and the conformance suite walks [`Primitive::samples`]. The
//! table holds, per primitive, the trait method's signature, the value's
//! fields and how the call's arguments fill them, which arguments are read
//! and which written in place, whether the call is pure, how to run it, how
//! to print it and one sample call. From it come the enum, `run`,
//! `is_pure`, `Display` and `samples` here, and any decorator backend that
//! records calls (`autograd-jit`'s `Traced` generates its whole `Backend`
//! impl from the same table).
//!
//! Adding a primitive: the trait method in [`crate::backend`], one row here,
//! the reference kernel and each backend's kernel. The compiler points at
//! each: a row without a method fails in `run`, a method without a default
//! and without a row fails in every backend and in the decorators.
//!
//! ```
//! use autograd_core::{Backend, HostData, Layout, Primitive, RefBackend, Shape, UnaryOp};
//! let relu = Primitive::<RefBackend>::Unary { op: UnaryOp::Relu, layout: Layout::contiguous(Shape::from([2])) };
//! let x = RefBackend::from_host(HostData::from(vec![-1.0f64, 2.0]));
//! let y = relu.run(&[&x], &mut [], None).unwrap();
//! assert_eq!(RefBackend::to_host(&y[0], &Layout::contiguous(Shape::from([2]))).unwrap().to_f64_vec(), vec![0.0, 2.0]);
//! assert!(relu.is_pure());
//! assert_eq!(relu.to_string(), "Relu [2]");
//! ```

use crate::attention::AttentionSpec;
use crate::fused_update::FusedUpdate;
use crate::fusion::{ElementwiseProgram, Instr};
use crate::rng::{Distribution, Generator};
use crate::{ArgReduceOp, Backend, BinaryOp, DType, Error, HostData, Layout, ReduceOp, Result, Shape, UnaryOp};
use smallvec::{SmallVec, smallvec};
use std::fmt;
use std::sync::Arc;

/// The storages a primitive makes (most make one or two: no heap allocation).
pub type Outputs<B> = SmallVec<[<B as Backend>::Storage; 2]>;

/// The table of primitives: calls `$callback!` with one row per primitive.
///
/// A row reads:
///
/// ```text
/// /// doc of the variant
/// Variant { field: Type = value from the method's arguments, .. }
/// pure: true | false;
/// fn method<generic: Bound>(args..) -> Return;   // the Backend method, as declared
/// reads: storages the call reads (an iterator of &Self::Storage);
/// writes: storages it updates in place (an iterator of &Self::Storage);
/// rng: the generator argument;                 // only for draws
/// returns: upload | one | two | many | none;    // the shape of Return
/// run: |ins, muts, rng| the call on B, from the fields and the buffers;
/// show: |f| how the call prints;
/// sample: one call the conformance suite runs (Self::sample(value, ins, muts));
/// ```
///
/// Generated from it here: [`Primitive`] and its methods; in
/// `autograd-jit`, the recording backend's `Backend` impl. A callback
/// macro matches the row grammar above and uses what it needs.
#[macro_export]
macro_rules! for_each_primitive {
    ($callback:ident) => {
        $callback! {
            /// [`Backend::from_host`](crate::Backend::from_host): uploads host data
            /// (kept: every replay uploads it again).
            FromHost { data: $crate::HostData = data }
            pure: true;
            fn from_host(data: $crate::HostData) -> Self::Storage;
            reads: [];
            writes: [];
            returns: upload;
            run: |ins, muts, rng| B::from_host(data.clone());
            show: |f| write!(f, "from_host {:?} x {}", data.dtype(), data.len());
            sample: Self::sample(Self::FromHost { data: values(4) }, vec![], vec![]);

            /// [`Backend::full`](crate::Backend::full)
            Full { shape: $crate::Shape = shape.clone(), value: f64 = value, dtype: $crate::DType = dtype }
            pure: true;
            fn full(shape: &$crate::Shape, value: f64, dtype: $crate::DType) -> $crate::Result<Self::Storage>;
            reads: [];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::full(shape, *value, *dtype);
            show: |f| write!(f, "full {value} {:?} {dtype:?}", shape.dims());
            sample: Self::sample(Self::Full { shape: Shape::from([2, 3]), value: 1.5, dtype: DType::F64 }, vec![], vec![]);

            /// [`Backend::random`](crate::Backend::random): draws from the
            /// generator the caller passes to [`Primitive::run`].
            Random { shape: $crate::Shape = shape.clone(), dtype: $crate::DType = dtype, dist: $crate::rng::Distribution = dist }
            pure: false;
            fn random(shape: &$crate::Shape, dtype: $crate::DType, dist: $crate::rng::Distribution, generator: &mut $crate::rng::Generator) -> $crate::Result<Self::Storage>;
            reads: [];
            writes: [];
            rng: generator;
            returns: one;
            run: |ins, muts, rng| B::random(shape, *dtype, *dist, needs_rng(rng)?);
            show: |f| write!(f, "random {dist:?} {:?} {dtype:?}", shape.dims());
            sample: Self::sample(Self::Random { shape: Shape::from([5]), dtype: DType::F64, dist: Distribution::Normal }, vec![], vec![]);

            /// [`Backend::cast`](crate::Backend::cast)
            Cast { layout: $crate::Layout = layout.clone(), dtype: $crate::DType = dtype }
            pure: true;
            fn cast(s: &Self::Storage, layout: &$crate::Layout, dtype: $crate::DType) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::cast(arg(ins, 0)?, layout, *dtype);
            show: |f| write!(f, "cast {dtype:?} {:?}", layout.dims());
            sample: Self::sample(Self::Cast { layout: l(&[2, 3]), dtype: DType::F32 }, vec![values(6)], vec![]);

            /// [`Backend::copy_strided`](crate::Backend::copy_strided)
            CopyStrided { layout: $crate::Layout = layout.clone() }
            pure: true;
            fn copy_strided(s: &Self::Storage, layout: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::copy_strided(arg(ins, 0)?, layout);
            show: |f| write!(f, "copy_strided {:?}", layout.dims());
            sample: Self::sample(Self::CopyStrided { layout: transposed(&[2, 3]) }, vec![values(6)], vec![]);

            /// [`Backend::unary`](crate::Backend::unary)
            Unary { op: $crate::UnaryOp = op, layout: $crate::Layout = layout.clone() }
            pure: true;
            fn unary(op: $crate::UnaryOp, s: &Self::Storage, layout: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::unary(*op, arg(ins, 0)?, layout);
            show: |f| write!(f, "{op:?} {:?}", layout.dims());
            sample: Self::sample(Self::Unary { op: UnaryOp::Exp, layout: l(&[2, 3]) }, vec![values(6)], vec![]);

            /// [`Backend::binary`](crate::Backend::binary)
            Binary { op: $crate::BinaryOp = op, la: $crate::Layout = la.clone(), lb: $crate::Layout = lb.clone() }
            pure: true;
            fn binary(op: $crate::BinaryOp, a: &Self::Storage, la: &$crate::Layout, b: &Self::Storage, lb: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [a, b];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::binary(*op, arg(ins, 0)?, la, arg(ins, 1)?, lb);
            show: |f| write!(f, "{op:?} {:?}", la.dims());
            sample: Self::sample(Self::Binary { op: BinaryOp::Mul, la: l(&[2, 3]), lb: broadcast(&[3], &[2, 3]) }, vec![values(6), values(3)], vec![]);

            /// [`Backend::where_select`](crate::Backend::where_select)
            Where { lc: $crate::Layout = lc.clone(), la: $crate::Layout = la.clone(), lb: $crate::Layout = lb.clone() }
            pure: true;
            fn where_select(cond: &Self::Storage, lc: &$crate::Layout, a: &Self::Storage, la: &$crate::Layout, b: &Self::Storage, lb: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [cond, a, b];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::where_select(arg(ins, 0)?, lc, arg(ins, 1)?, la, arg(ins, 2)?, lb);
            show: |f| write!(f, "where {:?}", lc.dims());
            sample: Self::sample(
                Self::Where { lc: l(&[4]), la: l(&[4]), lb: broadcast(&[1], &[4]) },
                vec![HostData::from(vec![1.0f64, 0.0, 0.0, 2.0]), values(4), values(1)],
                vec![],
            );

            /// [`Backend::reduce`](crate::Backend::reduce)
            Reduce { op: $crate::ReduceOp = op, layout: $crate::Layout = layout.clone(), dims: Vec<usize> = dims.to_vec() }
            pure: true;
            fn reduce(op: $crate::ReduceOp, s: &Self::Storage, layout: &$crate::Layout, dims: &[usize]) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::reduce(*op, arg(ins, 0)?, layout, dims);
            show: |f| write!(f, "reduce {op:?} {:?} over {dims:?}", layout.dims());
            sample: Self::sample(Self::Reduce { op: ReduceOp::Sum, layout: transposed(&[2, 3]), dims: vec![1] }, vec![values(6)], vec![]);

            /// [`Backend::arg_reduce`](crate::Backend::arg_reduce)
            ArgReduce { op: $crate::ArgReduceOp = op, layout: $crate::Layout = layout.clone(), dim: usize = dim }
            pure: true;
            fn arg_reduce(op: $crate::ArgReduceOp, s: &Self::Storage, layout: &$crate::Layout, dim: usize) -> $crate::Result<(Self::Storage, Self::Storage)>;
            reads: [s];
            writes: [];
            returns: two;
            run: |ins, muts, rng| B::arg_reduce(*op, arg(ins, 0)?, layout, *dim);
            show: |f| write!(f, "arg_reduce {op:?} {:?} dim {dim}", layout.dims());
            sample: Self::sample(Self::ArgReduce { op: ArgReduceOp::Max, layout: l(&[2, 3]), dim: 1 }, vec![values(6)], vec![]);

            /// [`Backend::matmul`](crate::Backend::matmul)
            Matmul { la: $crate::Layout = la.clone(), lb: $crate::Layout = lb.clone() }
            pure: true;
            fn matmul(a: &Self::Storage, la: &$crate::Layout, b: &Self::Storage, lb: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [a, b];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::matmul(arg(ins, 0)?, la, arg(ins, 1)?, lb);
            show: |f| write!(f, "matmul {:?} x {:?}", la.dims(), lb.dims());
            sample: Self::sample(Self::Matmul { la: l(&[2, 3]), lb: transposed(&[3, 2]) }, vec![values(6), values(6)], vec![]);

            /// [`Backend::addmm`](crate::Backend::addmm)
            Addmm { lc: $crate::Layout = lc.clone(), la: $crate::Layout = la.clone(), lb: $crate::Layout = lb.clone() }
            pure: true;
            fn addmm(c: &Self::Storage, lc: &$crate::Layout, a: &Self::Storage, la: &$crate::Layout, b: &Self::Storage, lb: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [c, a, b];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::addmm(arg(ins, 0)?, lc, arg(ins, 1)?, la, arg(ins, 2)?, lb);
            show: |f| write!(f, "addmm {:?} + {:?} x {:?}", lc.dims(), la.dims(), lb.dims());
            sample: Self::sample(
                Self::Addmm { lc: broadcast(&[2], &[2, 2]), la: l(&[2, 3]), lb: l(&[3, 2]) },
                vec![values(2), values(6), values(6)],
                vec![],
            );

            /// [`Backend::matmul_cast`](crate::Backend::matmul_cast)
            MatmulCast { la: $crate::Layout = la.clone(), lb: $crate::Layout = lb.clone(), dtype: $crate::DType = dtype }
            pure: true;
            fn matmul_cast(a: &Self::Storage, la: &$crate::Layout, b: &Self::Storage, lb: &$crate::Layout, dtype: $crate::DType) -> $crate::Result<Self::Storage>;
            reads: [a, b];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::matmul_cast(arg(ins, 0)?, la, arg(ins, 1)?, lb, *dtype);
            show: |f| write!(f, "matmul_cast {:?} x {:?} to {dtype:?}", la.dims(), lb.dims());
            sample: Self::sample(
                Self::MatmulCast { la: l(&[2, 3]), lb: transposed(&[3, 2]), dtype: DType::F32 },
                vec![values(6).convert(DType::BF16), values(6).convert(DType::BF16)],
                vec![],
            );

            /// [`Backend::gather`](crate::Backend::gather)
            Gather { layout: $crate::Layout = layout.clone(), dim: usize = dim, lidx: $crate::Layout = lidx.clone() }
            pure: true;
            fn gather(s: &Self::Storage, layout: &$crate::Layout, dim: usize, idx: &Self::Storage, lidx: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [s, idx];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::gather(arg(ins, 0)?, layout, *dim, arg(ins, 1)?, lidx);
            show: |f| write!(f, "gather {:?} dim {dim}", layout.dims());
            sample: Self::sample(
                Self::Gather { layout: l(&[2, 3]), dim: 1, lidx: l(&[2, 2]) },
                vec![values(6), HostData::from(vec![2i64, 0, 1, 1])],
                vec![],
            );

            /// [`Backend::scatter_add`](crate::Backend::scatter_add)
            ScatterAdd { shape: $crate::Shape = shape.clone(), dim: usize = dim, lidx: $crate::Layout = lidx.clone(), lsrc: $crate::Layout = lsrc.clone() }
            pure: true;
            fn scatter_add(shape: &$crate::Shape, dim: usize, idx: &Self::Storage, lidx: &$crate::Layout, src: &Self::Storage, lsrc: &$crate::Layout) -> $crate::Result<Self::Storage>;
            reads: [idx, src];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::scatter_add(shape, *dim, arg(ins, 0)?, lidx, arg(ins, 1)?, lsrc);
            show: |f| write!(f, "scatter_add {:?} dim {dim}", shape.dims());
            sample: Self::sample(
                Self::ScatterAdd { shape: Shape::from([2, 3]), dim: 1, lidx: l(&[2, 2]), lsrc: l(&[2, 2]) },
                vec![HostData::from(vec![2i64, 2, 0, 1]), values(4)],
                vec![],
            );

            /// [`Backend::assign`](crate::Backend::assign): writes `src` into
            /// the elements of `dst` its layout selects.
            Assign { ld: $crate::Layout = ld.clone(), ls: $crate::Layout = ls.clone() }
            pure: false;
            fn assign(dst: &mut Self::Storage, ld: &$crate::Layout, src: &Self::Storage, ls: &$crate::Layout) -> $crate::Result<()>;
            reads: [src];
            writes: [&*dst];
            returns: none;
            run: |ins, muts, rng| B::assign(arg_mut(muts, 0)?, ld, arg(ins, 0)?, ls);
            show: |f| write!(f, "assign {:?}", ld.dims());
            sample: Self::sample(Self::Assign { ld: transposed(&[3, 2]), ls: l(&[3, 2]) }, vec![values(6)], vec![HostData::from(vec![0.0f64; 6])]);

            /// [`Backend::cat`](crate::Backend::cat)
            Cat { layouts: Vec<$crate::Layout> = parts.iter().map(|(_, l)| (*l).clone()).collect(), dim: usize = dim }
            pure: true;
            fn cat(parts: &[(&Self::Storage, &$crate::Layout)], dim: usize) -> $crate::Result<Self::Storage>;
            reads: parts.iter().map(|(s, _)| *s);
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::cat(&with_layouts(ins, layouts)?, *dim);
            show: |f| write!(f, "cat {} parts dim {dim}", layouts.len());
            sample: Self::sample(Self::Cat { layouts: vec![l(&[2, 3]), l(&[1, 3])], dim: 0 }, vec![values(6), values(3)], vec![]);

            /// [`Backend::unfold`](crate::Backend::unfold)
            Unfold { layout: $crate::Layout = layout.clone(), window: $crate::window::Window = window.clone(), pad_value: f64 = pad_value }
            pure: true;
            fn unfold(s: &Self::Storage, layout: &$crate::Layout, window: &$crate::window::Window, pad_value: f64) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::unfold(arg(ins, 0)?, layout, window, *pad_value);
            show: |f| write!(f, "unfold {:?} kernel {:?} stride {:?}", layout.dims(), window.kernel(), window.stride());
            sample: Self::sample(
                Self::Unfold { layout: l(&[1, 4, 3]).transpose(1, 2).expect("rank 3"), window: sample_window(), pad_value: -1.5 },
                vec![values(12)],
                vec![],
            );

            /// [`Backend::fold`](crate::Backend::fold)
            Fold { layout: $crate::Layout = layout.clone(), window: $crate::window::Window = window.clone(), spatial: Vec<usize> = spatial.to_vec() }
            pure: true;
            fn fold(s: &Self::Storage, layout: &$crate::Layout, window: &$crate::window::Window, spatial: &[usize]) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::fold(arg(ins, 0)?, layout, window, spatial);
            show: |f| write!(f, "fold {:?} into {spatial:?} kernel {:?}", layout.dims(), window.kernel());
            sample: Self::sample(Self::Fold { layout: l(&[1, 6, 3]), window: sample_window(), spatial: vec![4] }, vec![values(18)], vec![]);

            /// [`Backend::fused_update`](crate::Backend::fused_update): the
            /// update, type-erased; `muts` are the parameter, its scalars,
            /// then its states.
            FusedUpdate { update: $crate::primitive::Update<B> = $crate::primitive::Update::new(update.clone()), lg: $crate::Layout = lg.clone() }
            pure: false;
            fn fused_update<U: $crate::fused_update::FusedUpdate>(update: &U, param: &mut Self::Storage, grad: &Self::Storage, lg: &$crate::Layout, states: &mut [&mut Self::Storage], scalars: &mut Self::Storage) -> $crate::Result<()>;
            reads: [grad];
            writes: [&*param, &*scalars].into_iter().chain(states.iter().map(|s| &**s));
            returns: none;
            run: |ins, muts, rng| update.run(muts, arg(ins, 0)?, lg);
            show: |f| write!(f, "fused_update {update:?}");
            sample: Self::sample(
                Self::FusedUpdate { update: Update::new(SampleUpdate { lr: 0.0, momentum: 0.9 }), lg: transposed(&[2, 2]) },
                vec![values(4)],
                vec![values(4), HostData::from(vec![0.1f64, 0.0]), HostData::from(vec![0.5f64; 4])],
            );

            /// [`Backend::fused_elementwise`](crate::Backend::fused_elementwise)
            FusedElementwise {
                program: std::sync::Arc<$crate::fusion::ElementwiseProgram> = std::sync::Arc::new(program.clone()),
                layouts: Vec<$crate::Layout> = inputs.iter().map(|(_, l)| (*l).clone()).collect(),
            }
            pure: true;
            fn fused_elementwise(program: &$crate::fusion::ElementwiseProgram, inputs: &[(&Self::Storage, &$crate::Layout)]) -> $crate::Result<Vec<Self::Storage>>;
            reads: inputs.iter().map(|(s, _)| *s);
            writes: [];
            returns: many;
            run: |ins, muts, rng| B::fused_elementwise(program, &with_layouts(ins, layouts)?);
            show: |f| show_program(f, program, layouts);
            sample: Self::sample(
                Self::FusedElementwise { program: Arc::new(sample_program()), layouts: vec![l(&[2, 3]), broadcast(&[3], &[2, 3])] },
                vec![values(6), values(3)],
                vec![],
            );

            /// [`Backend::layer_norm`](crate::Backend::layer_norm)
            LayerNorm { layout: $crate::Layout = layout.clone(), k: usize = k, eps: f64 = eps }
            pure: true;
            fn layer_norm(s: &Self::Storage, layout: &$crate::Layout, k: usize, eps: f64) -> $crate::Result<(Self::Storage, Self::Storage)>;
            reads: [s];
            writes: [];
            returns: two;
            run: |ins, muts, rng| B::layer_norm(arg(ins, 0)?, layout, *k, *eps);
            show: |f| write!(f, "layer_norm {:?} last {k}", layout.dims());
            sample: Self::sample(Self::LayerNorm { layout: l(&[2, 3]), k: 1, eps: 1e-5 }, vec![values(6)], vec![]);

            /// [`Backend::softmax`](crate::Backend::softmax)
            Softmax { layout: $crate::Layout = layout.clone(), dim: usize = dim }
            pure: true;
            fn softmax(s: &Self::Storage, layout: &$crate::Layout, dim: usize) -> $crate::Result<Self::Storage>;
            reads: [s];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::softmax(arg(ins, 0)?, layout, *dim);
            show: |f| write!(f, "softmax {:?} dim {dim}", layout.dims());
            sample: Self::sample(Self::Softmax { layout: transposed(&[3, 2]), dim: 1 }, vec![values(6)], vec![]);

            /// [`Backend::layer_norm_backward`](crate::Backend::layer_norm_backward)
            LayerNormBackward { lg: $crate::Layout = lg.clone(), lx: $crate::Layout = lx.clone(), lr: $crate::Layout = lr.clone(), k: usize = k }
            pure: true;
            fn layer_norm_backward(g: &Self::Storage, lg: &$crate::Layout, xhat: &Self::Storage, lx: &$crate::Layout, rstd: &Self::Storage, lr: &$crate::Layout, k: usize) -> $crate::Result<Self::Storage>;
            reads: [g, xhat, rstd];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::layer_norm_backward(arg(ins, 0)?, lg, arg(ins, 1)?, lx, arg(ins, 2)?, lr, *k);
            show: |f| write!(f, "layer_norm_backward {:?} last {k}", lg.dims());
            sample: Self::sample(
                Self::LayerNormBackward { lg: transposed(&[2, 3]), lx: l(&[2, 3]), lr: l(&[2, 1]), k: 1 },
                vec![values(6), values(6), values(2)],
                vec![],
            );

            /// [`Backend::softmax_backward`](crate::Backend::softmax_backward)
            SoftmaxBackward { ly: $crate::Layout = ly.clone(), lg: $crate::Layout = lg.clone(), dim: usize = dim, log: bool = log }
            pure: true;
            fn softmax_backward(y: &Self::Storage, ly: &$crate::Layout, g: &Self::Storage, lg: &$crate::Layout, dim: usize, log: bool) -> $crate::Result<Self::Storage>;
            reads: [y, g];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::softmax_backward(arg(ins, 0)?, ly, arg(ins, 1)?, lg, *dim, *log);
            show: |f| write!(f, "{}softmax_backward {:?} dim {dim}", if *log { "log_" } else { "" }, ly.dims());
            sample: Self::sample(
                Self::SoftmaxBackward { ly: l(&[2, 3]), lg: transposed(&[2, 3]), dim: 1, log: false },
                vec![values(6), values(6)],
                vec![],
            );

            /// [`Backend::attention`](crate::Backend::attention)
            Attention { layouts: Vec<$crate::Layout> = inputs.iter().map(|(_, l)| (*l).clone()).collect(), spec: $crate::attention::AttentionSpec = spec }
            pure: true;
            fn attention(inputs: &[(&Self::Storage, &$crate::Layout)], spec: $crate::attention::AttentionSpec) -> $crate::Result<(Self::Storage, Self::Storage)>;
            reads: inputs.iter().map(|(s, _)| *s);
            writes: [];
            returns: two;
            run: |ins, muts, rng| B::attention(&with_layouts(ins, layouts)?, *spec);
            show: |f| write!(f, "attention {:?} scale {} causal {} dropout {}", layouts.first().map(|l| l.dims().to_vec()).unwrap_or_default(), spec.scale, spec.causal, spec.dropout);
            sample: Self::sample(
                Self::Attention { layouts: vec![l(&[2, 3, 2]), transposed_last(&[2, 4, 2]), l(&[2, 4, 1]), broadcast(&[4], &[2, 3, 4])], spec: sample_attention() },
                vec![values(12), values(16), values(8), values(4)],
                vec![],
            );

            /// [`Backend::attention_backward`](crate::Backend::attention_backward)
            AttentionBackward { layouts: Vec<$crate::Layout> = inputs.iter().map(|(_, l)| (*l).clone()).collect(), spec: $crate::attention::AttentionSpec = spec }
            pure: true;
            fn attention_backward(inputs: &[(&Self::Storage, &$crate::Layout)], spec: $crate::attention::AttentionSpec) -> $crate::Result<Vec<Self::Storage>>;
            reads: inputs.iter().map(|(s, _)| *s);
            writes: [];
            returns: many;
            run: |ins, muts, rng| B::attention_backward(&with_layouts(ins, layouts)?, *spec);
            show: |f| write!(f, "attention_backward {:?} scale {} causal {} dropout {}", layouts.first().map(|l| l.dims().to_vec()).unwrap_or_default(), spec.scale, spec.causal, spec.dropout);
            sample: Self::sample(
                Self::AttentionBackward {
                    layouts: vec![l(&[3, 2]), l(&[4, 2]), l(&[4, 2]), l(&[3, 2]), l(&[3]), transposed(&[3, 2])],
                    spec: AttentionSpec { scale: 0.5, causal: true, dropout: 0.0 },
                },
                vec![values(6), values(8), values(8), values(6), values(3), values(6)],
                vec![],
            );

            /// [`Backend::attention_dropout`](crate::Backend::attention_dropout)
            AttentionDropout { lseed: $crate::Layout = lseed.clone(), shape: $crate::Shape = shape.clone(), p: f64 = p, dtype: $crate::DType = dtype }
            pure: true;
            fn attention_dropout(seed: &Self::Storage, lseed: &$crate::Layout, shape: &$crate::Shape, p: f64, dtype: $crate::DType) -> $crate::Result<Self::Storage>;
            reads: [seed];
            writes: [];
            returns: one;
            run: |ins, muts, rng| B::attention_dropout(arg(ins, 0)?, lseed, shape, *p, *dtype);
            show: |f| write!(f, "attention_dropout {:?} p {p} {dtype:?}", shape.dims());
            sample: Self::sample(
                Self::AttentionDropout { lseed: l(&[2]), shape: Shape::from([2, 3, 4]), p: 0.25, dtype: DType::F64 },
                vec![HostData::from(vec![0.125f64, 0.75])],
                vec![],
            );
        }
    };
}

/// Generates [`Primitive`] and its methods from the table.
macro_rules! define_primitive {
    ($(
        $(#[doc = $doc:literal])*
        $v:ident { $($field:ident : $fty:ty = $fval:expr),* $(,)? }
        pure: $pure:literal;
        fn $method:ident $(<$g:ident : $gb:path>)? ($($arg:ident : $aty:ty),* $(,)?) -> $ret:ty;
        reads: $reads:expr;
        writes: $writes:expr;
        $(rng: $rng:expr;)?
        returns: $kind:ident;
        run: |$ins:ident, $muts:ident, $gen:ident| $run:expr;
        show: |$f:ident| $show:expr;
        sample: $sample:expr;
    )*) => {
        /// One call of a backend primitive with everything but its buffers
        /// (see the module docs): what a recorder keeps and a replay runs.
        #[derive(Clone)]
        pub enum Primitive<B: Backend> {
            $(
                $(#[doc = $doc])*
                #[allow(missing_docs)]
                $v { $($field: $fty),* },
            )*
        }

        impl<B: Backend> Primitive<B> {
            /// The method names of every primitive, in table order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($method)),*];

            /// The name of the `Backend` method this calls.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Primitive::$v { .. } => stringify!($method),)*
                }
            }

            /// Pure: the same inputs give the same outputs and nothing else
            /// changes (a random draw advances the generator; an assignment
            /// or an update writes a buffer in place).
            pub fn is_pure(&self) -> bool {
                match self {
                    $(Primitive::$v { .. } => $pure,)*
                }
            }

            /// Whether the call draws from a generator (pass one to [`Primitive::run`]).
            pub fn draws(&self) -> bool {
                match self {
                    $(Primitive::$v { .. } => !<[&str]>::is_empty(&[$(stringify!($rng)),*]),)*
                }
            }

            /// Runs the call on `B`: `ins` are the storages it reads and
            /// `muts` those it updates in place, in the table's order;
            /// `rng` is the generator a draw takes. Wrong counts of buffers
            /// are an `Err`, as is a draw without a generator.
            #[allow(unused_variables)]
            pub fn run(&self, ins: &[&B::Storage], muts: &mut [&mut B::Storage], rng: Option<&mut Generator>) -> Result<Outputs<B>> {
                match self {
                    $(Primitive::$v { $($field),* } => {
                        let $ins = ins;
                        let $muts = &mut *muts;
                        let $gen = rng;
                        into_outputs::$kind::<B>($run)
                    })*
                }
            }

            /// One sample call of every primitive, in table order: the
            /// inputs and updated buffers as host data (f64 unless the
            /// primitive needs indices), for the conformance suite to run on
            /// a backend and on the reference.
            pub fn samples() -> Vec<Sample<B>> {
                vec![$($sample),*]
            }

            fn sample(primitive: Self, ins: Vec<HostData>, muts: Vec<HostData>) -> Sample<B> {
                Sample { primitive, ins, muts }
            }
        }

        impl<B: Backend> fmt::Display for Primitive<B> {
            #[allow(unused_variables)]
            fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $(Primitive::$v { $($field),* } => {
                        let $f = &mut *out;
                        $show
                    })*
                }
            }
        }
    };
}

for_each_primitive!(define_primitive);

impl<B: Backend> fmt::Debug for Primitive<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<B: Backend> Primitive<B> {
    /// [`Primitive::run`], consuming the call: an upload moves its data
    /// instead of copying it (a recorder runs each call once this way).
    pub fn run_once(self, ins: &[&B::Storage], muts: &mut [&mut B::Storage], rng: Option<&mut Generator>) -> Result<Outputs<B>> {
        match self {
            Primitive::FromHost { data } => Ok(smallvec![B::from_host(data)]),
            other => other.run(ins, muts, rng),
        }
    }
}

/// One sample call of a primitive ([`Primitive::samples`]).
pub struct Sample<B: Backend> {
    /// The call.
    pub primitive: Primitive<B>,
    /// What it reads, uploaded in order.
    pub ins: Vec<HostData>,
    /// What it updates in place, uploaded in order.
    pub muts: Vec<HostData>,
}

impl<B: Backend> Sample<B> {
    /// Uploads the sample's buffers to `B`, runs the call with a generator
    /// seeded by `seed`, and downloads what it made, then the updated
    /// buffers, each whole and in order.
    ///
    /// ```
    /// use autograd_core::{Primitive, RefBackend};
    /// for s in Primitive::<RefBackend>::samples() {
    ///     let out = s.run_on_host(7).unwrap();
    ///     assert!(!out.is_empty(), "{}", s.primitive);
    /// }
    /// ```
    pub fn run_on_host(&self, seed: u64) -> Result<Vec<HostData>> {
        let ins: Vec<B::Storage> = self.ins.iter().cloned().map(B::from_host).collect();
        let mut muts: Vec<B::Storage> = self.muts.iter().cloned().map(B::from_host).collect();
        let ins_refs: Vec<&B::Storage> = ins.iter().collect();
        let mut mut_refs: Vec<&mut B::Storage> = muts.iter_mut().collect();
        let outs = self.primitive.run(&ins_refs, &mut mut_refs, Some(&mut Generator::new(seed)))?;
        let whole = |s: &B::Storage| B::to_host(s, &Layout::contiguous(Shape::from([B::len(s)])));
        outs.iter().chain(muts.iter()).map(whole).collect()
    }
}

/// A parameter update ([`FusedUpdate`]) with its type erased, so that a
/// primitive value can hold any optimizer's rule and run it on `B`.
#[derive(Clone)]
pub struct Update<B: Backend>(Arc<dyn ErasedUpdate<B>>);

trait ErasedUpdate<B: Backend>: Send + Sync {
    fn run(
        &self,
        param: &mut B::Storage,
        grad: &B::Storage,
        lg: &Layout,
        states: &mut [&mut B::Storage],
        scalars: &mut B::Storage,
    ) -> Result<()>;
    fn describe(&self) -> String;
}

struct Erased<U>(U);

impl<B: Backend, U: FusedUpdate> ErasedUpdate<B> for Erased<U> {
    fn run(
        &self,
        param: &mut B::Storage,
        grad: &B::Storage,
        lg: &Layout,
        states: &mut [&mut B::Storage],
        scalars: &mut B::Storage,
    ) -> Result<()> {
        B::fused_update(&self.0, param, grad, lg, states, scalars)
    }
    fn describe(&self) -> String {
        format!("{:?}", self.0)
    }
}

impl<B: Backend> Update<B> {
    /// Erases `update`'s type.
    pub fn new<U: FusedUpdate>(update: U) -> Self {
        Update(Arc::new(Erased(update)))
    }
    /// [`Backend::fused_update`] with this update: `muts` holds the
    /// parameter, its scalars, then its state buffers.
    pub fn run(&self, muts: &mut [&mut B::Storage], grad: &B::Storage, lg: &Layout) -> Result<()> {
        match muts {
            [param, scalars, states @ ..] => self.0.run(param, grad, lg, states, scalars),
            _ => Err(Error::msg("fused_update: called without its parameter and scalars buffers")),
        }
    }
}

impl<B: Backend> fmt::Debug for Update<B> {
    /// The update's own `Debug`, cut at 60 characters (a printed program
    /// stays one line per op).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.describe();
        match s.char_indices().nth(57) {
            Some((i, _)) if s.len() > 60 => write!(f, "{}...", &s[..i]),
            _ => f.write_str(&s),
        }
    }
}

/// Turns what a `Backend` method returns into [`Outputs`]: one function per
/// `returns:` kind of the table.
mod into_outputs {
    use super::*;

    pub(super) fn upload<B: Backend>(s: B::Storage) -> Result<Outputs<B>> {
        Ok(smallvec![s])
    }
    pub(super) fn one<B: Backend>(r: Result<B::Storage>) -> Result<Outputs<B>> {
        Ok(smallvec![r?])
    }
    pub(super) fn two<B: Backend>(r: Result<(B::Storage, B::Storage)>) -> Result<Outputs<B>> {
        let (a, b) = r?;
        Ok(smallvec![a, b])
    }
    pub(super) fn many<B: Backend>(r: Result<Vec<B::Storage>>) -> Result<Outputs<B>> {
        Ok(r?.into_iter().collect())
    }
    pub(super) fn none<B: Backend>(r: Result<()>) -> Result<Outputs<B>> {
        r?;
        Ok(SmallVec::new())
    }
}

/// Input `k` of a call, or an `Err` when the caller passed fewer.
fn arg<'a, S>(ins: &[&'a S], k: usize) -> Result<&'a S> {
    ins.get(k).copied().ok_or_else(|| Error::msg(format!("primitive run: input {k} is missing (got {} inputs)", ins.len())))
}

/// Updated buffer `k` of a call, or an `Err` when the caller passed fewer.
fn arg_mut<'a, S>(muts: &'a mut [&mut S], k: usize) -> Result<&'a mut S> {
    let n = muts.len();
    muts.get_mut(k).map(|s| &mut **s).ok_or_else(|| Error::msg(format!("primitive run: updated buffer {k} is missing (got {n})")))
}

/// The inputs paired with the layouts a call recorded for them.
fn with_layouts<'a, S>(ins: &[&'a S], layouts: &'a [Layout]) -> Result<SmallVec<[(&'a S, &'a Layout); 8]>> {
    if ins.len() != layouts.len() {
        return Err(Error::msg(format!("primitive run: {} inputs for {} layouts", ins.len(), layouts.len())));
    }
    Ok(ins.iter().copied().zip(layouts).collect())
}

fn needs_rng(rng: Option<&mut Generator>) -> Result<&mut Generator> {
    rng.ok_or_else(|| Error::msg("primitive run: a random draw needs a generator"))
}

fn show_program(f: &mut fmt::Formatter<'_>, program: &ElementwiseProgram, layouts: &[Layout]) -> fmt::Result {
    let steps: Vec<String> = program
        .instrs()
        .iter()
        .map(|s| match s {
            Instr::Unary(u, a) => format!("{u:?}(r{a})"),
            Instr::Binary(b, x, y) => format!("{b:?}(r{x}, r{y})"),
        })
        .collect();
    let dims = layouts.first().map(|l| l.dims().to_vec()).unwrap_or_default();
    write!(f, "fused {dims:?} [{} steps: {}]", steps.len(), steps.join(" "))
}

// What the samples are built from.

fn l(dims: &[usize]) -> Layout {
    Layout::contiguous(Shape::from(dims))
}

/// A view of `dims` stored the other way round (a transpose of a
/// contiguous `[dims[1], dims[0]]` buffer).
fn transposed(dims: &[usize]) -> Layout {
    l(&[dims[1], dims[0]]).transpose(0, 1).expect("rank 2")
}

/// `dims` stored with its last two dims the other way round.
fn transposed_last(dims: &[usize]) -> Layout {
    let r = dims.len();
    let mut stored = dims.to_vec();
    stored.swap(r - 2, r - 1);
    l(&stored).transpose(r - 2, r - 1).expect("rank 2 or more")
}

/// Not causal, and not the default scale: the sample checks both are passed on.
fn sample_attention() -> AttentionSpec {
    AttentionSpec { scale: 0.7, causal: false, dropout: 0.0 }
}

fn broadcast(from: &[usize], to: &[usize]) -> Layout {
    l(from).broadcast_as(&Shape::from(to)).expect("broadcastable sample shapes")
}

/// A 1-d window of 2 taps, dilated by 2, padded 1 before and 2 after:
/// three positions over 4 elements, the first and last reading padding.
fn sample_window() -> crate::window::Window {
    crate::window::Window::new("sample", &[2], &[2], &[(1, 2)], &[2]).expect("a valid window")
}

/// `n` distinct values of both signs.
fn values(n: usize) -> HostData {
    HostData::from((0..n).map(|i| ((i as f64) * 0.7 + 0.3).sin() * 2.0).collect::<Vec<f64>>())
}

/// `tanh(a + b)` and `a + b`.
fn sample_program() -> ElementwiseProgram {
    ElementwiseProgram::new(2, vec![Instr::Binary(BinaryOp::Add, 0, 1), Instr::Unary(UnaryOp::Tanh, 2)], vec![3, 2])
        .expect("a valid program")
}

/// The sample update: momentum SGD, one state buffer; its learning rate
/// is the first scalar, and it counts its calls in the second.
#[derive(Clone, Debug)]
struct SampleUpdate {
    lr: f64,
    momentum: f64,
}

impl FusedUpdate for SampleUpdate {
    fn num_states(&self) -> usize {
        1
    }
    fn num_scalars(&self) -> usize {
        2
    }
    fn resolve(&self, scalars: &mut [f64]) -> Result<Self> {
        scalars[1] += 1.0;
        Ok(SampleUpdate { lr: scalars[0], momentum: self.momentum })
    }
    fn apply_f32(&self, p: &mut [f32], g: &[f32], states: &mut [&mut [f32]]) {
        for ((p, g), s) in p.iter_mut().zip(g).zip(states[0].iter_mut()) {
            *s = self.momentum as f32 * *s + g;
            *p -= self.lr as f32 * *s;
        }
    }
    fn apply_f64(&self, p: &mut [f64], g: &[f64], states: &mut [&mut [f64]]) {
        for ((p, g), s) in p.iter_mut().zip(g).zip(states[0].iter_mut()) {
            *s = self.momentum * *s + g;
            *p -= self.lr * *s;
        }
    }
}
