//! A GPU backend on [wgpu](https://wgpu.rs): tensors in device buffers, work
//! queued on the device and read back only when the host asks (`to_host`,
//! `item`, printing).
//!
//! Every primitive of the [`Backend`] trait works on [`Wgpu`] for every
//! dtype. The families with a WGSL kernel run on the device for f32:
//! unary and binary ops with broadcasting and any strides, `where`,
//! reductions and arg reductions over any dims, gather, scatter-add,
//! strided copies, `assign`, `cat`, `full`, batched `matmul`,
//! `unfold`/`fold`, softmax and layer norm rows forward and backward,
//! casts between f32, f16, bf16, int64 and bool, int64 arithmetic and
//! comparisons, compiled fused programs, the optimizers' update rules and
//! uniform f32 draws (the CPU's numbers from the same generator).
//! f16 and bf16 run the same float kernels in f32, rounded once where the
//! CPU rounds (`low`; unary and binary ops read and write halves in one
//! kernel). The others take the host path ([`host_calls`]
//! counts them): read back, computed by the CPU backend's kernels,
//! uploaded. `addmm` is a product that adds its term as it writes;
//! attention runs its composite on top of those, as on any backend.
//!
//! Storages live in pooled device buffers ([`memory`]); an adapter is
//! opened on first use. Without one (no GPU and no software Vulkan driver)
//! every call returns an `Err` that says so.
//!
//! ```
//! use autograd_core::{Backend, HostData, Layout, Shape, UnaryOp};
//! use autograd_wgpu::Wgpu;
//! if autograd_wgpu::adapter().is_ok() {
//!     let l = Layout::contiguous(Shape::from([3]));
//!     let x = Wgpu::from_host(HostData::from(vec![-1.0f32, 0.0, 2.0]));
//!     let y = Wgpu::unary(UnaryOp::Relu, &x, &l).unwrap();
//!     assert_eq!(Wgpu::to_host(&y, &l).unwrap(), HostData::from(vec![0.0f32, 0.0, 2.0]));
//! }
//! ```

mod device;
mod host;
mod kernels;
mod low;
pub mod memory;
mod storage;

pub use device::adapter;
pub use host::host_calls;
pub use storage::{WgpuStorage, device_reads};
/// The wgpu crate this backend is built on (for [`adapter`]'s types).
pub use wgpu;

use autograd_core::attention::AttentionSpec;
use autograd_core::backend::composite;
use autograd_core::fusion::ElementwiseProgram;
use autograd_core::rng::{Distribution, Generator};
use autograd_core::window::Window;
use autograd_core::{ArgReduceOp, Backend, BinaryOp, DType, HostData, HostStorage, Layout, ReduceOp, Result, Shape, UnaryOp};
use host::OnHost;

/// The GPU backend (a marker type, like the CPU's): `Tensor::<Wgpu>`.
///
/// ```
/// use autograd_core::Backend;
/// assert_eq!(autograd_wgpu::Wgpu::NAME, "wgpu");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Wgpu;

/// Whether the kernels that move elements as bits serve this dtype (whole
/// 32-bit words: f32, f64, int64).
fn moves(d: DType) -> bool {
    kernels::index::words(d).is_some()
}

/// Whether this dtype is narrower than a 32-bit word (f16, bf16, bool):
/// the word kernels move it spread one element per word.
fn narrow(d: DType) -> bool {
    d.size_in_bytes() < 4
}

/// Up to this many elements, `full` uploads its values instead of queuing a kernel.
const SMALL_FULL: usize = 1024;

/// Whether the kernels serve this dtype (the host path serves the rest).
fn on_device(d: DType) -> bool {
    d == DType::F32
}

impl Backend for Wgpu {
    type Storage = WgpuStorage;
    const NAME: &'static str = "wgpu";

    fn available() -> Result<()> {
        device::gpu().map(|_| ())
    }
    fn dtype(s: &WgpuStorage) -> DType {
        s.dtype
    }
    fn len(s: &WgpuStorage) -> usize {
        s.len
    }
    fn from_host(data: HostData) -> WgpuStorage {
        WgpuStorage::upload(&data)
    }
    fn to_host(s: &WgpuStorage, layout: &Layout) -> Result<HostData> {
        let host: HostStorage = s.read_storage()?;
        autograd_cpu::Cpu::to_host(&host, layout)
    }
    /// Every dtype on the device: the value converted as the CPU converts
    /// it, its bytes repeated by a kernel (small tensors are uploaded,
    /// which queues no kernel).
    fn full(shape: &Shape, value: f64, dtype: DType) -> Result<WgpuStorage> {
        let n = autograd_core::validate::output("full", shape, dtype)?;
        let g = device::gpu()?;
        let element = HostData::from_f64(&[value], dtype);
        if n <= SMALL_FULL {
            let s = WgpuStorage::uninit(g, "full", dtype, n)?;
            s.write(g, &storage::host_bytes(&element).repeat(n))?;
            return Ok(s);
        }
        kernels::elementwise::fill_bytes(g, &WgpuStorage::uninit(g, "full", dtype, n)?, &storage::host_bytes(&element))
    }
    /// Uniform f32 draws on the device with the CPU's bits (each thread
    /// started where the sequential stream would be); the others through
    /// the host.
    fn random(shape: &Shape, dtype: DType, dist: Distribution, generator: &mut Generator) -> Result<WgpuStorage> {
        if dist == Distribution::Uniform && kernels::random::served(dtype) {
            return kernels::random::uniform(device::gpu()?, shape, dtype, generator);
        }
        <Wgpu as OnHost>::random(shape, dtype, dist, generator)
    }
    fn cast(s: &WgpuStorage, layout: &Layout, dtype: DType) -> Result<WgpuStorage> {
        if s.dtype == dtype && moves(dtype) {
            return kernels::index::copy(device::gpu()?, s, layout);
        }
        // casts between the served dtypes, and copies of f16, bf16 and bool
        if kernels::cast::on_device(s.dtype, dtype) {
            return kernels::cast::cast(device::gpu()?, s, layout, dtype);
        }
        <Wgpu as OnHost>::cast(s, layout, dtype)
    }
    fn copy_strided(s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
        if moves(s.dtype) {
            return kernels::index::copy(device::gpu()?, s, layout);
        }
        if kernels::cast::on_device(s.dtype, s.dtype) {
            return kernels::cast::cast(device::gpu()?, s, layout, s.dtype);
        }
        <Wgpu as OnHost>::copy_strided(s, layout)
    }
    fn unary(op: UnaryOp, s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
        if on_device(s.dtype) {
            return kernels::elementwise::unary(device::gpu()?, op, s, layout);
        }
        if kernels::half::served(s.dtype) {
            return kernels::half::unary(device::gpu()?, op, s, layout);
        }
        <Wgpu as OnHost>::unary(op, s, layout)
    }
    fn binary(op: BinaryOp, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
        if on_device(a.dtype) && a.dtype == b.dtype {
            return kernels::elementwise::binary(device::gpu()?, op, a, la, b, lb);
        }
        if a.dtype == DType::I64 && b.dtype == DType::I64 && kernels::integer::on_device(op) {
            return kernels::integer::binary(device::gpu()?, op, a, la, b, lb);
        }
        if kernels::half::served(a.dtype) && a.dtype == b.dtype {
            return kernels::half::binary(device::gpu()?, op, a, la, b, lb);
        }
        <Wgpu as OnHost>::binary(op, a, la, b, lb)
    }
    fn where_select(c: &WgpuStorage, lc: &Layout, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
        if moves(a.dtype) && a.dtype == b.dtype && kernels::index::where_on_device(c.dtype) {
            return kernels::index::where_select(device::gpu()?, c, lc, a, la, b, lb);
        }
        // f16/bf16 operands, then a half condition, widened as the CPU widens them
        if let Some(r) =
            low::through_f32("where", &[(a, la), (b, lb)], |w| <Self as Backend>::where_select(c, lc, w[0].0, w[0].1, w[1].0, w[1].1))
        {
            return r;
        }
        if c.dtype.is_low_precision() {
            autograd_core::validate::input("where", c.len, lc)?;
            let (wc, lwc) = low::widen(device::gpu()?, c, lc)?;
            return <Self as Backend>::where_select(&wc, &lwc, a, la, b, lb);
        }
        <Wgpu as OnHost>::where_select(c, lc, a, la, b, lb)
    }
    fn reduce(op: ReduceOp, s: &WgpuStorage, layout: &Layout, dims: &[usize]) -> Result<WgpuStorage> {
        // f16 and bf16 read as they are, folded in f32, rounded once
        if on_device(s.dtype) || kernels::half::served(s.dtype) {
            return kernels::reduce::reduce(device::gpu()?, op, s, layout, dims);
        }
        <Wgpu as OnHost>::reduce(op, s, layout, dims)
    }
    fn arg_reduce(op: ArgReduceOp, s: &WgpuStorage, layout: &Layout, dim: usize) -> Result<(WgpuStorage, WgpuStorage)> {
        if on_device(s.dtype) || kernels::half::served(s.dtype) {
            return kernels::reduce::arg_reduce(device::gpu()?, op, s, layout, dim);
        }
        <Wgpu as OnHost>::arg_reduce(op, s, layout, dim)
    }
    fn matmul(a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
        // f16 and bf16 read as they are, summed in f32, rounded once
        if (on_device(a.dtype) || kernels::half::served(a.dtype)) && a.dtype == b.dtype {
            return kernels::matmul::matmul(device::gpu()?, a, la, b, lb);
        }
        <Wgpu as OnHost>::matmul(a, la, b, lb)
    }
    fn matmul_cast(a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout, dtype: DType) -> Result<WgpuStorage> {
        // a half product widened: its f32 sums rounded in place, one launch
        if kernels::half::served(a.dtype) && a.dtype == b.dtype && dtype == DType::F32 {
            return kernels::matmul::matmul_widened(device::gpu()?, a, la, b, lb);
        }
        // else the trait's default: the product, then the cast
        autograd_core::validate::matmul(la, lb, a.dtype)?;
        let mut dims = la.dims().to_vec();
        dims[la.rank() - 1] = lb.dims()[lb.rank() - 1];
        let y = <Self as Backend>::matmul(a, la, b, lb)?;
        <Self as Backend>::cast(&y, &Layout::contiguous(Shape::new(dims)), dtype)
    }
    fn gather(s: &WgpuStorage, layout: &Layout, dim: usize, idx: &WgpuStorage, lidx: &Layout) -> Result<WgpuStorage> {
        if kernels::index::assignable(s.dtype) && idx.dtype == DType::I64 {
            return kernels::index::gather(device::gpu()?, s, layout, dim, idx, lidx);
        }
        <Wgpu as OnHost>::gather(s, layout, dim, idx, lidx)
    }
    fn scatter_add(shape: &Shape, dim: usize, idx: &WgpuStorage, lidx: &Layout, src: &WgpuStorage, lsrc: &Layout) -> Result<WgpuStorage> {
        if on_device(src.dtype) && idx.dtype == DType::I64 {
            return kernels::index::scatter_add(device::gpu()?, shape, dim, idx, lidx, src, lsrc);
        }
        if idx.dtype == DType::I64
            && let Some(r) =
                low::through_f32("scatter_add", &[(src, lsrc)], |w| <Self as Backend>::scatter_add(shape, dim, idx, lidx, w[0].0, w[0].1))
        {
            return r;
        }
        <Wgpu as OnHost>::scatter_add(shape, dim, idx, lidx, src, lsrc)
    }
    fn assign(dst: &mut WgpuStorage, ld: &Layout, src: &WgpuStorage, ls: &Layout) -> Result<()> {
        // a view whose elements overlap takes the host path, which writes
        // them in order (the last write wins, as on the CPU)
        if kernels::index::assignable(dst.dtype) && src.dtype == dst.dtype && kernels::index::non_overlapping(ld) {
            return kernels::index::assign(device::gpu()?, dst, ld, src, ls);
        }
        <Wgpu as OnHost>::assign(dst, ld, src, ls)
    }
    fn cat(parts: &[(&WgpuStorage, &Layout)], dim: usize) -> Result<WgpuStorage> {
        if let Some(&(first, _)) = parts.first()
            && kernels::index::assignable(first.dtype)
            && parts.iter().all(|(s, _)| s.dtype == first.dtype)
        {
            return kernels::index::cat(device::gpu()?, parts, dim);
        }
        <Wgpu as OnHost>::cat(parts, dim)
    }
    fn unfold(s: &WgpuStorage, layout: &Layout, window: &Window, pad_value: f64) -> Result<WgpuStorage> {
        if on_device(s.dtype) && window.rank() <= kernels::window::MAX_RANK {
            return kernels::window::unfold(device::gpu()?, s, layout, window, (pad_value as f32).to_bits());
        }
        if narrow(s.dtype) && window.rank() <= kernels::window::MAX_RANK {
            autograd_core::validate::input("unfold", s.len, layout)?;
            // the padding's bits in the narrow dtype, carried in a word as the elements are
            let pad = HostData::from_f64(&[pad_value], s.dtype).to_le_bytes();
            let bits = pad.iter().rev().fold(0u32, |w, &b| (w << 8) | b as u32);
            return low::through_words(s, |w| kernels::window::unfold(device::gpu()?, w, layout, window, bits));
        }
        <Wgpu as OnHost>::unfold(s, layout, window, pad_value)
    }
    fn fold(s: &WgpuStorage, layout: &Layout, window: &Window, spatial: &[usize]) -> Result<WgpuStorage> {
        if on_device(s.dtype) && window.rank() <= kernels::window::MAX_RANK {
            return kernels::window::fold(device::gpu()?, s, layout, window, spatial);
        }
        if let Some(r) = low::through_f32("fold", &[(s, layout)], |w| <Self as Backend>::fold(w[0].0, w[0].1, window, spatial)) {
            return r;
        }
        <Wgpu as OnHost>::fold(s, layout, window, spatial)
    }
    // The fused primitives: on f32, a kernel of their own (softmax and
    // layer norm rows, `addmm` as a product that adds `c` as it writes) or
    // their composites over the kernels above; f16/bf16 run the f32 path
    // and round once (a composite in the half dtype would round every
    // step); f64 takes the CPU backend's own kernel.
    fn addmm(c: &WgpuStorage, lc: &Layout, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
        if (on_device(a.dtype) || kernels::half::served(a.dtype)) && a.dtype == b.dtype && a.dtype == c.dtype {
            return kernels::matmul::addmm(device::gpu()?, c, lc, a, la, b, lb);
        }
        <Wgpu as OnHost>::addmm(c, lc, a, la, b, lb)
    }
    fn fused_elementwise(program: &ElementwiseProgram, inputs: &[(&WgpuStorage, &Layout)]) -> Result<Vec<WgpuStorage>> {
        if inputs.iter().all(|(s, _)| on_device(s.dtype)) {
            let g = device::gpu()?;
            if kernels::fused::fusable(g, program) {
                return kernels::fused::run(g, program, inputs);
            }
            return autograd_core::fusion::unfused::<Self>(program, inputs);
        }
        // f16/bf16 programs run op by op, each step rounding as the eager op does (as on the CPU)
        if low::low_dtype(inputs).is_some() {
            return autograd_core::fusion::unfused::<Self>(program, inputs);
        }
        <Wgpu as OnHost>::fused_elementwise(program, inputs)
    }
    fn layer_norm(s: &WgpuStorage, layout: &Layout, k: usize, eps: f64) -> Result<(WgpuStorage, WgpuStorage)> {
        // the row kernels read f16 and bf16 as they are, compute in f32, round once
        if on_device(s.dtype) || kernels::half::served(s.dtype) {
            if let Some(out) = kernels::rows::layer_norm(device::gpu()?, s, layout, k, eps)? {
                return Ok(out);
            }
            if on_device(s.dtype) {
                return composite::layer_norm::<Self>(s, layout, k, eps);
            }
        }
        // rows of no elements on halves: the composite in f32, rounded
        if let Some(r) = low::through_f32("layer_norm", &[(s, layout)], |w| <Self as Backend>::layer_norm(w[0].0, w[0].1, k, eps)) {
            return r;
        }
        <Wgpu as OnHost>::layer_norm(s, layout, k, eps)
    }
    fn softmax(s: &WgpuStorage, layout: &Layout, dim: usize) -> Result<WgpuStorage> {
        if on_device(s.dtype) || kernels::half::served(s.dtype) {
            return kernels::rows::softmax(device::gpu()?, s, layout, dim);
        }
        <Wgpu as OnHost>::softmax(s, layout, dim)
    }
    fn layer_norm_backward(
        g: &WgpuStorage,
        lg: &Layout,
        xhat: &WgpuStorage,
        lx: &Layout,
        rstd: &WgpuStorage,
        lr: &Layout,
        k: usize,
    ) -> Result<WgpuStorage> {
        let (f32s, halves) =
            ([(g, lg), (xhat, lx), (rstd, lr)].iter().all(|(s, _)| on_device(s.dtype)), low::low_dtype(&[(g, lg), (xhat, lx), (rstd, lr)]));
        if f32s || halves.is_some() {
            return kernels::rows::layer_norm_backward(device::gpu()?, (g, lg), (xhat, lx), (rstd, lr), k);
        }
        <Wgpu as OnHost>::layer_norm_backward(g, lg, xhat, lx, rstd, lr, k)
    }
    fn softmax_backward(y: &WgpuStorage, ly: &Layout, g: &WgpuStorage, lg: &Layout, dim: usize, log: bool) -> Result<WgpuStorage> {
        if (on_device(y.dtype) && on_device(g.dtype)) || low::low_dtype(&[(y, ly), (g, lg)]).is_some() {
            return kernels::rows::softmax_backward(device::gpu()?, y, ly, g, lg, dim, log);
        }
        <Wgpu as OnHost>::softmax_backward(y, ly, g, lg, dim, log)
    }
    fn attention(inputs: &[(&WgpuStorage, &Layout)], spec: AttentionSpec) -> Result<(WgpuStorage, WgpuStorage)> {
        if inputs.first().is_some_and(|(s, _)| on_device(s.dtype)) {
            return autograd_core::attention::forward::<Self>(inputs, spec);
        }
        if let Some(r) = low::through_f32("attention", low::without_seed(inputs, spec), |w| {
            <Self as Backend>::attention(&low::with_seed(w, inputs, spec), spec)
        }) {
            return r;
        }
        <Wgpu as OnHost>::attention(inputs, spec)
    }
    fn attention_backward(inputs: &[(&WgpuStorage, &Layout)], spec: AttentionSpec) -> Result<Vec<WgpuStorage>> {
        if inputs.first().is_some_and(|(s, _)| on_device(s.dtype)) {
            return autograd_core::attention::backward::<Self>(inputs, spec);
        }
        if let Some(r) = low::through_f32("attention_backward", low::without_seed(inputs, spec), |w| {
            <Self as Backend>::attention_backward(&low::with_seed(w, inputs, spec), spec)
        }) {
            return r;
        }
        <Wgpu as OnHost>::attention_backward(inputs, spec)
    }
    fn attention_dropout(seed: &WgpuStorage, lseed: &Layout, shape: &Shape, p: f64, dtype: DType) -> Result<WgpuStorage> {
        if kernels::dropout::served(dtype) {
            return kernels::dropout::scales(device::gpu()?, seed, lseed, shape, p, dtype);
        }
        autograd_core::attention::dropout_scales::<Self>(seed, lseed, shape, p, dtype)
    }
    fn fused_update<U: autograd_core::fused_update::FusedUpdate>(
        update: &U,
        param: &mut WgpuStorage,
        grad: &WgpuStorage,
        lg: &Layout,
        states: &mut [&mut WgpuStorage],
        scalars: &mut WgpuStorage,
    ) -> Result<()> {
        use autograd_core::fused_update as fu;
        let same = |s: &WgpuStorage| s.dtype == param.dtype;
        let half = param.dtype.is_low_precision();
        if (on_device(param.dtype) || half) && same(grad) && states.iter().all(|s| same(s)) {
            fu::check::<Self, U>(update, param, lg, states, scalars)?;
            // the scalars (a step count, a learning rate) are read back to
            // resolve this step's rule: a few bytes, not the buffers
            let ls = Layout::contiguous(Shape::new(vec![scalars.len]));
            let (resolved, values) = fu::resolve(update, &<Self as Backend>::to_host(scalars, &ls)?.to_f64_vec(), states.len())?;
            if let Some(program) = resolved.program() {
                let g = device::gpu()?;
                if half {
                    low::update_through_f32(g, &program, param, grad, lg, states)?;
                } else if !kernels::fused::update(g, &program, param, grad, lg, states)? {
                    fu::run_program::<Self>(&program, param, grad, lg, states)?;
                }
                return scalars.write(g, &storage::host_bytes(&HostData::from(values.to_vec())));
            }
        }
        <Wgpu as OnHost>::fused_update(update, param, grad, lg, states, scalars)
    }
}
