//! f16 and bf16 on the device, emulated in f32: the operands widened by
//! the cast kernel, the op run by the f32 kernels, each floating output
//! rounded once to the operands' dtype by the cast kernel again.
//!
//! This is the CPU backend's rule for every float family
//! (`autograd_core::low_precision::through_f32`, PyTorch's `opmath_t`: a
//! half is computed in float and rounded once), so a low-precision op on
//! `Wgpu` rounds where the CPU's rounds and no host trip is needed. WGSL's
//! own `f16` (the `shader-f16` feature) is not used: arithmetic in f16
//! would round every step, and bf16 has no WGSL type at all. The price is
//! two extra launches and an f32 temporary per operand, freed to the pool
//! as the op returns; unary and binary ops, the most frequent, avoid it
//! with kernels that widen and round as they read and write
//! (`kernels::half`, the same bits), and so do products and `addmm`
//! (`kernels::matmul` reads halves and rounds its f32 sums once) and
//! reductions (`kernels::reduce`, the same) and the softmax and
//! layer-norm rows (`kernels::rows`).

use crate::WgpuStorage;
use crate::device::{self, Gpu};
use crate::kernels::{self, cast};
use autograd_core::attention::AttentionSpec;
use autograd_core::fused_update::UpdateProgram;
use autograd_core::{DType, Layout, Result, Shape, validate};

/// The results of an f32 op whose f32 outputs are rounded back (indices
/// and bools pass as they are).
pub(crate) trait Narrow: Sized {
    /// Each f32 storage rounded to `dtype`.
    fn narrow(self, gpu: &Gpu, dtype: DType) -> Result<Self>;
}

impl Narrow for WgpuStorage {
    fn narrow(self, gpu: &Gpu, dtype: DType) -> Result<Self> {
        if self.dtype != DType::F32 {
            return Ok(self);
        }
        cast::cast(gpu, &self, &Layout::contiguous(Shape::new(vec![self.len])), dtype)
    }
}

impl Narrow for (WgpuStorage, WgpuStorage) {
    fn narrow(self, gpu: &Gpu, dtype: DType) -> Result<Self> {
        Ok((self.0.narrow(gpu, dtype)?, self.1.narrow(gpu, dtype)?))
    }
}

impl Narrow for Vec<WgpuStorage> {
    fn narrow(self, gpu: &Gpu, dtype: DType) -> Result<Self> {
        self.into_iter().map(|s| s.narrow(gpu, dtype)).collect()
    }
}

/// The dtype `inputs` are computed in f32 for: every input that is not a
/// `Bool` (an attention mask, a `where` condition) is f16, or every one is
/// bf16. `None` otherwise: the caller's own dispatch goes on (and reports
/// a mismatch as it does for any dtype).
pub(crate) fn low_dtype(inputs: &[(&WgpuStorage, &Layout)]) -> Option<DType> {
    let mut floats = inputs.iter().map(|(s, _)| s.dtype).filter(|&d| d != DType::Bool);
    let dtype = floats.next()?;
    (dtype.is_low_precision() && floats.all(|d| d == dtype)).then_some(dtype)
}

/// Runs `f32_op` on `inputs` widened to f32 (`Bool` inputs as they are)
/// and rounds its f32 results back, when [`low_dtype`] finds f16 or bf16
/// operands; `None` otherwise. Each layout is checked against its storage
/// first, so that an `Err` names `op`. `f32_op` is the backend's own
/// method called again, so the f32 operands take whatever path f32 takes.
pub(crate) fn through_f32<R: Narrow>(
    op: &'static str,
    inputs: &[(&WgpuStorage, &Layout)],
    f32_op: impl FnOnce(&[(&WgpuStorage, &Layout)]) -> Result<R>,
) -> Option<Result<R>> {
    let dtype = low_dtype(inputs)?;
    Some(run(op, dtype, inputs, f32_op))
}

fn run<R: Narrow>(
    op: &'static str,
    dtype: DType,
    inputs: &[(&WgpuStorage, &Layout)],
    f32_op: impl FnOnce(&[(&WgpuStorage, &Layout)]) -> Result<R>,
) -> Result<R> {
    for (s, l) in inputs {
        validate::input(op, s.len, l)?;
    }
    let gpu = device::gpu()?;
    let wide: Vec<Option<(WgpuStorage, Layout)>> =
        inputs.iter().map(|&(s, l)| if s.dtype == DType::Bool { Ok(None) } else { widen(gpu, s, l).map(Some) }).collect::<Result<_>>()?;
    let operands: Vec<(&WgpuStorage, &Layout)> =
        inputs.iter().zip(&wide).map(|(&input, w)| w.as_ref().map_or(input, |(s, l)| (s, l))).collect();
    f32_op(&operands)?.narrow(gpu, dtype)
}

/// `s` read through `layout` as f32, with the layout the f32 kernel reads
/// it through: the view's elements gathered contiguous when the view reads
/// no more elements than the storage holds (a slice, a transpose: the
/// kernel after it then walks contiguous memory), else (a broadcast, which
/// gathering would repeat) the whole storage widened under the same layout.
pub(crate) fn widen(gpu: &Gpu, s: &WgpuStorage, layout: &Layout) -> Result<(WgpuStorage, Layout)> {
    if layout.numel() <= s.len {
        return Ok((cast::cast(gpu, s, layout, DType::F32)?, Layout::contiguous(layout.shape().clone())));
    }
    Ok((cast::cast(gpu, s, &Layout::contiguous(Shape::new(vec![s.len])), DType::F32)?, layout.clone()))
}

/// An attention call's inputs without its dropout seed (an f64 `[2]`, the
/// last input when the call drops weights), which is not widened.
pub(crate) fn without_seed<'a, 'b>(
    inputs: &'b [(&'a WgpuStorage, &'a Layout)],
    spec: AttentionSpec,
) -> &'b [(&'a WgpuStorage, &'a Layout)] {
    if spec.dropout == 0.0 { inputs } else { &inputs[..inputs.len().saturating_sub(1)] }
}

/// `wide` (the widened [`without_seed`] inputs) with the seed of `inputs` put back.
pub(crate) fn with_seed<'a>(
    wide: &[(&'a WgpuStorage, &'a Layout)],
    inputs: &[(&'a WgpuStorage, &'a Layout)],
    spec: AttentionSpec,
) -> Vec<(&'a WgpuStorage, &'a Layout)> {
    let mut all = wide.to_vec();
    if spec.dropout != 0.0 {
        all.extend(inputs.last().copied());
    }
    all
}

/// `f` run on `s`'s elements spread one per 32-bit word (f16, bf16 and
/// bool: [`cast::move_bits`] over the whole storage, so `f`'s layouts
/// index it as they index `s`), its output packed back into `s`'s dtype:
/// a word kernel (unfold, whose output is larger than its image anyway)
/// serves the narrow dtypes bit for bit.
pub(crate) fn through_words(s: &WgpuStorage, f: impl FnOnce(&WgpuStorage) -> Result<WgpuStorage>) -> Result<WgpuStorage> {
    let gpu = device::gpu()?;
    let whole = Layout::contiguous(Shape::new(vec![s.len]));
    let words = f(&cast::move_bits(gpu, s, &whole, DType::F32)?)?;
    cast::move_bits(gpu, &words, &Layout::contiguous(Shape::new(vec![words.len])), s.dtype)
}

/// An optimizer's update program on f16 or bf16 buffers: the parameter,
/// gradient and states widened, the f32 update run on those copies, the
/// parameter and states rounded back into their own buffers. (The CPU's
/// generic path computes in f64 and rounds once: where its result lies
/// within f32's precision of a half's rounding midpoint the two round
/// apart, by one half ulp.)
pub(crate) fn update_through_f32(
    gpu: &Gpu,
    program: &UpdateProgram,
    param: &mut WgpuStorage,
    grad: &WgpuStorage,
    lg: &Layout,
    states: &mut [&mut WgpuStorage],
) -> Result<()> {
    let dtype = param.dtype;
    let whole = Layout::contiguous(Shape::new(vec![param.len]));
    let mut p = cast::cast(gpu, param, &whole, DType::F32)?;
    let (g, lg) = widen(gpu, grad, lg)?;
    let mut wide: Vec<WgpuStorage> = states.iter().map(|s| cast::cast(gpu, s, &whole, DType::F32)).collect::<Result<_>>()?;
    let mut refs: Vec<&mut WgpuStorage> = wide.iter_mut().collect();
    if !kernels::fused::update(gpu, program, &p, &g, &lg, &refs)? {
        autograd_core::fused_update::run_program::<crate::Wgpu>(program, &mut p, &g, &lg, &mut refs)?;
    }
    kernels::index::assign(gpu, param, &whole, &cast::cast(gpu, &p, &whole, dtype)?, &whole)?;
    for (dst, w) in states.iter_mut().zip(&wide) {
        kernels::index::assign(gpu, dst, &whole, &cast::cast(gpu, w, &whole, dtype)?, &whole)?;
    }
    Ok(())
}
