//! Batched matrix multiplication through the `gemm` crate.
//!
//! `gemm` takes row and column strides for every operand, so transposed
//! views (the `A^T B` and `A B^T` products of every backward pass) are
//! multiplied without a copy. It packs into cache-blocked panels and picks
//! AVX-512/AVX2/scalar micro-kernels at run time. The choice against the
//! alternatives was made by measurement; see `benches/README.md`.
//!
//! Two choices are made here, per product, from its shape and strides:
//! - **Orientation.** The kernel computes column-major tiles, so it reads a
//!   row-major `C = A B` as `C^T = B^T A^T`, where a row-major `B` is already
//!   in the layout its packed panels want. `Linear`'s `x W^T` is the bad
//!   case: the weight must be repacked (a transposing gather of all `n k`
//!   elements) on every call, which at batch 16 costs as much as the product.
//!   Computing `C^T = W x^T` instead repacks only `x` (`m k`) and transposes
//!   the small result (`m n`). `orientation` compares the two costs.
//! - **Threads.** `threads_for` splits a product over threads only when
//!   each thread's block is large enough to repay a wake-up.

pub mod amx;
pub mod bf16;
mod blocked;
mod rounded;
mod shared;
pub(crate) mod small;
pub mod widening;

use shared::View;
pub(crate) use shared::{GEMM_PAR_MIN_FLOPS_PER_THREAD, SendPtr};

use crate::elementwise::copy_strided;
use crate::strided::{TILE_C, TILE_R, linear_offset};
use crate::transpose::Transpose;
use autograd_core::low_precision::through_f32;
use autograd_core::memory::{filled, scratch};
use autograd_core::scalar::FloatElem;
use autograd_core::{HostStorage, Layout, Result};
use gemm::Parallelism;
use rayon::prelude::*;

/// Whether to compute `C^T = B^T A^T` into a scratch buffer and transpose it
/// (`true`) rather than `C` directly, for an `m x k` by `k x n` product.
///
/// The kernel reads its left operand in column panels and its right one by
/// columns: directly, the left operand is `B^T` (free when `B` is
/// row-major, otherwise all `n k` elements are repacked) and the right one
/// `A^T` (free when `A` is row-major); transposed, they are `A` (free when
/// column-major) and `B` (free when column-major), plus the `m n` transpose
/// of the result. Elements moved is the cost; the transposed form must win
/// by 3x, since its kernel runs on the short side of the product (measured on
/// `Linear`'s shapes with 1 and 2 threads, benches/README.md: at batch 16 it
/// is 1.5-2.2x faster, at batch 128 a draw, at 1024 slower).
fn orientation(m: usize, n: usize, k: usize, a: View, b: View) -> bool {
    let pack = |free: bool, elems: usize| if free { 0 } else { elems };
    let direct = pack(b.cs == 1, n * k) + pack(a.cs == 1, m * k);
    let transposed = pack(a.rs == 1, m * k) + pack(b.rs == 1, n * k) + m * n;
    3 * transposed < direct
}

/// Bytes between `B`'s columns at which a column-major `B` (a weight read
/// transposed, `x W^T`) is copied row-major before `gemm`'s AVX-512
/// kernels read it: at a multiple of 1 KiB their walk across the columns
/// maps them onto a few L1 sets. Measured (f32, 128 x k by k x 512, Zen 4):
/// `W^T` read in place took 1.3x (k = 256, 768), 1.8x (512) and 2.15x
/// (1024) the time of the same product on a row-major copy at 1 thread
/// (1.27-2.0x at 2), 1.08-1.10x at other `k`; the copy (the register
/// transpose, over the product's threads) costs a fraction of the gap.
/// `gemm`'s AVX2 kernels (a CPU without AVX-512) read it in place at
/// 1.03-1.07x (1.2x at k = 1024), where the copy measured slower.
const ALIASING_COLUMN_BYTES: usize = 1024;

/// Whether an f32 product reads `b` (`k x n`) column by column across a
/// stride that aliases in L1 ([`ALIASING_COLUMN_BYTES`]) on `gemm`'s
/// AVX-512 kernels (`avx512`: the CPU has them, so `gemm` runs them),
/// with enough rows of `A` (`m`, at least 16) for `gemm` to pack it. f64
/// keeps the read in place: staged, its products measured 10% faster at
/// k = 512 and 1024 on 1 thread but 5-15% slower at 128 and 256, and no
/// faster or slower on 2 (the in-place read costs it 1.02-1.33x).
fn stage_columns<T>(avx512: bool, m: usize, k: usize, n: usize, b: View) -> bool {
    let f32 = std::mem::size_of::<T>() == 4;
    let stride = b.cs.saturating_mul(std::mem::size_of::<T>());
    f32 && avx512 && m >= 16 && k > 1 && n > 1 && b.rs == 1 && b.cs > 1 && stride.is_multiple_of(ALIASING_COLUMN_BYTES)
}

/// Products with fewer multiply-adds than this (about 7 x 7 x 7) run on
/// the small product's register tiles rather than `gemm`, whose fixed cost
/// per call dominates there: 4 x 4 x 4 takes a quarter of `gemm`'s time,
/// while from 8 x 8 x 8 up `gemm` is 1.05-1.8x faster (measured with the
/// `small_product_against_gemm` test below; benches/README.md).
const SMALL_PRODUCT_MAX_MNK: usize = 343;

/// How many threads share one `m x n x k` product (1: no split).
fn threads_for(m: usize, n: usize, k: usize) -> usize {
    let threads = rayon::current_num_threads();
    let by_work = m.saturating_mul(n).saturating_mul(k) / GEMM_PAR_MIN_FLOPS_PER_THREAD;
    // blocks of at least 16 rows (or columns) keep the micro-kernels full
    let by_rows = m.max(n).div_ceil(16);
    threads.min(by_work).min(by_rows).max(1)
}

/// Copies the `rows x cols` matrix `src[off + i rs + j cs]` into `dst`
/// (row-major): a transposed source (row stride 1) through the register
/// transpose, any other walk with a column stride other than 1 in
/// `TILE_R x TILE_C` tiles, so the source is read a few cache lines at a time.
fn gather2d<T: Transpose>(src: &[T], s: View, rows: usize, cols: usize, dst: &mut [T]) {
    if s.rs == 1 && s.cs != 1 {
        T::transpose_into(src, s.off, s.cs, rows, cols, dst);
        return;
    }
    if s.cs == 1 {
        for (i, row) in dst.chunks_exact_mut(cols).enumerate().take(rows) {
            let o = s.off + i * s.rs;
            row.copy_from_slice(&src[o..o + cols]);
        }
        return;
    }
    for i0 in (0..rows).step_by(TILE_R) {
        for j0 in (0..cols).step_by(TILE_C) {
            for i in i0..(i0 + TILE_R).min(rows) {
                let o = s.off + i * s.rs;
                for j in j0..(j0 + TILE_C).min(cols) {
                    dst[i * cols + j] = src[o + j * s.cs];
                }
            }
        }
    }
}

/// `dst (+)= lhs @ rhs` for one `m x k` by `k x n` product, `dst` row-major
/// `m x n` (read first when `read_dst`), split over `parts` threads by rows
/// or columns, each part a single-threaded GEMM (measured faster on 2 cores
/// than the crate's own rayon split; see benches/README.md).
///
/// # Safety
/// `dst.len() == m * n`; every offset `lhs.off + i lhs.rs + p lhs.cs`
/// (`i < m`, `p < k`) is inside `a`, and `rhs.off + p rhs.rs + j rhs.cs`
/// (`p < k`, `j < n`) inside `b`; all strides fit in `isize`.
#[allow(clippy::too_many_arguments)]
unsafe fn product<T: FloatElem>(
    dst: &mut [T],
    read_dst: bool,
    (m, n, k): (usize, usize, usize),
    a: &[T],
    lhs: View,
    b: &[T],
    rhs: View,
    parts: usize,
) {
    debug_assert_eq!(dst.len(), m * n);
    // SAFETY (for every call below): the block's destination is rows
    // `r0..r0 + mm` and columns `c0..c0 + nn` of the row-major `dst`
    // (row stride n), with r0 + mm <= m and c0 + nn <= n; its lhs pointer is
    // element (r0, 0) of `lhs` and its rhs pointer element (0, c0) of `rhs`,
    // so every element gemm reads is (i, p), p < k, of lhs and (p, j) of rhs
    // inside the bounds the caller guarantees; gemm only reads the operands.
    let block = |d: *mut T, r0: usize, mm: usize, c0: usize, nn: usize| unsafe {
        gemm::gemm(
            mm,
            nn,
            k,
            d.add(r0 * n + c0),
            1,
            n as isize,
            read_dst,
            a.as_ptr().add(lhs.off + r0 * lhs.rs),
            lhs.cs as isize,
            lhs.rs as isize,
            b.as_ptr().add(rhs.off + c0 * rhs.cs),
            rhs.cs as isize,
            rhs.rs as isize,
            T::one(),
            T::one(),
            false,
            false,
            false,
            Parallelism::None,
        );
    };
    if parts <= 1 {
        block(dst.as_mut_ptr(), 0, m, 0, n);
        return;
    }
    // Each part packs (once more) the operand it shares with the others
    // when the kernel must repack it (a column stride other than 1): split
    // the dim that keeps every part busy (>= 16 rows or columns each) with
    // the least packing repeated; ties split the longer dim.
    let busy = |total: usize| total.div_ceil(16).min(parts);
    let repeated = |shared: View, elems: usize| if shared.cs == 1 { 0 } else { elems };
    let rows_key = (std::cmp::Reverse(busy(m)), repeated(rhs, n * k), std::cmp::Reverse(m));
    let cols_key = (std::cmp::Reverse(busy(n)), repeated(lhs, m * k), std::cmp::Reverse(n));
    let split_rows = rows_key <= cols_key;
    let total = if split_rows { m } else { n };
    // blocks of a multiple of 16 rows/cols keep the micro-kernels full
    let chunk = total.div_ceil(parts).div_ceil(16) * 16;
    let d = SendPtr(dst.as_mut_ptr());
    (0..parts).into_par_iter().for_each(|p| {
        let d = &d;
        let start = (p * chunk).min(total);
        let len = chunk.min(total - start);
        if len == 0 {
            return;
        }
        // the parts write disjoint row (column) ranges of `dst`
        if split_rows { block(d.0, start, len, 0, n) } else { block(d.0, 0, m, start, len) }
    });
}

/// `[batch.., m, k] x [batch.., k, n]`, batch dims identical (stride 0 where
/// broadcast), plus `init` (`(c, lc)`, `lc` of the output's shape, stride 0
/// where broadcast: a bias) when given: `addmm`.
///
/// The caller ([`crate::Cpu`]'s `Backend::matmul`/`addmm`) has run
/// `validate::input` on every layout (every offset they produce, computed
/// with checked arithmetic, is below the slice's length, and their element
/// counts are at most `MAX_NUMEL`, so every offset fits in `isize`) and
/// `validate::matmul` (ranks >= 2, equal batch dims, `la`'s k equal to `lb`'s,
/// an output of `nb * m * n` elements that can be allocated; `lc` of that
/// shape). The `unsafe` GEMM calls below rely on exactly these facts.
pub(crate) fn matmul<T: FloatElem + Transpose>(a: &[T], la: &Layout, b: &[T], lb: &Layout, init: Option<(&[T], &Layout)>) -> Vec<T> {
    // `gemm` (built with `x86-v4`) runs its AVX-512 kernels wherever the
    // CPU has them; a cap below AVX-512 (`AUTOGRAD_CPU_ISA`, which `gemm`
    // does not see) turns the staging off too, so that a build of `gemm`
    // without `x86-v4` under the cap runs as an AVX2-only CPU would
    let avx512 = crate::simd::active_isa() >= crate::simd::Isa::Avx512;
    matmul_staging(a, la, b, lb, init, avx512)
}

/// [`matmul`], with `B` staged where [`stage_columns`] says for `avx512`.
fn matmul_staging<T: FloatElem + Transpose>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    init: Option<(&[T], &Layout)>,
    avx512: bool,
) -> Vec<T> {
    let r = la.rank();
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let batch_dims = &la.dims()[..r - 2];
    let nb: usize = batch_dims.iter().product();
    let mut out = match init {
        // Not zeroed when k > 0: every element of every m x n matrix is
        // written below before anything reads it. With an init, `gather2d`
        // copies it over the whole matrix first; without, gemm runs with
        // `read_dst = false`, which in gemm 0.19 sets its alpha to 0 and
        // stores every element without loading it (its microkernels, gemv
        // and gevv all test `alpha.is_zero()` before reading `dst`); the
        // transposed orientation gathers its full result into the matrix.
        _ if k > 0 => scratch(nb * m * n, T::zero()),
        Some((c, lc)) => copy_strided(c, lc),
        None => filled(nb * m * n, T::zero()),
    };
    if out.is_empty() || k == 0 {
        return out;
    }
    // A zero stride inside one matrix (an expanded row or column) is outside
    // what the packed kernels expect; such operands are rare, so copy them.
    let inner_zero = |l: &Layout| {
        let (s, d) = (l.strides(), l.dims());
        (s[r - 2] == 0 && d[r - 2] > 1) || (s[r - 1] == 0 && d[r - 1] > 1)
    };
    let packable = |v: &[T], l: &Layout| inner_zero(l).then(|| (copy_strided(v, l), Layout::contiguous(l.shape().clone())));
    let (ca, cb) = (packable(a, la), packable(b, lb));
    let (a, la) = ca.as_ref().map_or((a, la), |(v, l)| (&v[..], l));
    let (b, lb) = cb.as_ref().map_or((b, lb), |(v, l)| (&v[..], l));
    // A dim of size 1 may carry any stride (it is never multiplied by more
    // than 0), even one that does not fit in `isize`: give gemm 1 there, so
    // every stride it receives is a real distance inside the operand.
    let unit = |l: &Layout| -> Vec<usize> { l.strides().iter().zip(l.dims()).map(|(&s, &d)| if d == 1 { 1 } else { s }).collect() };
    let (sa, sb) = (unit(la), unit(lb));
    let sc = init.map(|(_, lc)| lc.strides().to_vec());
    let mat = |bi: usize, l: &Layout, s: &[usize]| View {
        off: l.offset() + linear_offset(bi, batch_dims, &s[..r - 2]),
        rs: s[r - 2],
        cs: s[r - 1],
    };
    let parts = threads_for(m, n, k);
    let one = |bi: usize, dst: &mut [T]| {
        let (ma, mb) = (mat(bi, la, &sa), mat(bi, lb, &sb));
        let mc = init.zip(sc.as_deref()).map(|((c, lc), s)| (c, mat(bi, lc, s)));
        if m.saturating_mul(n).saturating_mul(k) < SMALL_PRODUCT_MAX_MNK && mb.cs == 1 {
            // a tiny product: the register tiles, on rows of B as they lie
            // (A read through its strides), added into the init or zeros
            match mc {
                Some((c, mc)) => gather2d(c, mc, m, n, dst),
                None => dst.fill(T::zero()),
            }
            let (ai, bi) = (small::Strided { off: ma.off, rs: ma.rs, cs: ma.cs }, small::Rows { off: mb.off, ld: mb.rs });
            small::add_product((m, n, k), a, ai, b, bi, dst, small::Rows { off: 0, ld: n });
        } else if orientation(m, n, k, ma, mb) {
            let mut t = vec![T::zero(); m * n];
            if let Some((c, mc)) = mc {
                gather2d(c, mc.t(), n, m, &mut t);
            }
            // SAFETY: `t` is n x m; (B^T)(j, p) is B(p, j) and (A^T)(p, i)
            // is A(i, p), elements of the validated operands (see above).
            unsafe { product(&mut t, mc.is_some(), (n, m, k), b, mb.t(), a, ma.t(), parts) };
            gather2d(&t, View { off: 0, rs: 1, cs: m }, m, n, dst);
        } else {
            if let Some((c, mc)) = mc {
                gather2d(c, mc, m, n, dst);
            }
            // a column-major B across an aliasing stride, copied row-major
            // (over the product's threads, a band of B's rows each)
            let staged = stage_columns::<T>(avx512, m, k, n, mb).then(|| {
                let mut v = scratch(k * n, T::zero());
                let band = k.div_ceil(parts).max(1);
                let copy = |(i, rows): (usize, &mut [T])| {
                    let p0 = i * band;
                    gather2d(b, View { off: mb.off + p0 * mb.rs, ..mb }, rows.len() / n, n, rows);
                };
                if parts > 1 {
                    v.par_chunks_mut(band * n).enumerate().for_each(copy);
                } else {
                    copy((0, &mut v[..]));
                }
                v
            });
            let (b, mb) = match &staged {
                Some(v) => (&v[..], View { off: 0, rs: n, cs: 1 }),
                None => (b, mb),
            };
            // SAFETY: `dst` is one m x n chunk of `out`; A(i, p) and B(p, j)
            // are elements of the validated operands (see above), or of
            // the row-major k x n copy of B.
            unsafe { product(dst, mc.is_some(), (m, n, k), a, ma, b, mb, parts) };
        }
    };
    if parts == 1 && nb > 1 && m * n * k * nb >= 2 * GEMM_PAR_MIN_FLOPS_PER_THREAD {
        out.par_chunks_mut(m * n).enumerate().for_each(|(bi, dst)| one(bi, dst));
    } else {
        for (bi, dst) in out.chunks_mut(m * n).enumerate() {
            one(bi, dst);
        }
    }
    out
}

/// f16 and bf16 products (`init`: addmm's bias): the rounded inputs
/// multiplied with f32 accumulation, the result rounded once, as
/// PyTorch's CPU `mm` does for both. bf16 runs on AMX tiles where the CPU
/// has them ([`amx`]), else the AVX512_BF16 kernel where it has that and
/// it pays ([`bf16`]); otherwise, and for f16, the operands are converted
/// while they are packed for f32 FMA micro-kernels ([`widening`]), or,
/// below AVX2, widened whole for the f32 GEMM. `None` when the operands
/// are not both f16 or both bf16 (the caller's dispatch reports the
/// mismatch).
pub(crate) fn low_precision(
    a: &HostStorage,
    la: &Layout,
    b: &HostStorage,
    lb: &Layout,
    init: Option<(&HostStorage, &Layout)>,
) -> Option<Result<HostStorage>> {
    match (a, b, init) {
        (HostStorage::BF16(x), HostStorage::BF16(y), None) => {
            if let Some(kernel) = bf16_kernel::<half::bf16>() {
                return Some(Ok(made(la, lb, |out| kernel(x, la, y, lb, None, out)).into()));
            }
        }
        (HostStorage::BF16(x), HostStorage::BF16(y), Some((HostStorage::BF16(z), lc))) => {
            if let Some(kernel) = bf16_kernel::<half::bf16>() {
                return Some(Ok(made(la, lb, |out| kernel(x, la, y, lb, Some((z, lc)), out)).into()));
            }
        }
        (HostStorage::F16(x), HostStorage::F16(y), None) if widening::available() => {
            return Some(Ok(made::<half::f16>(la, lb, |out| widening::matmul(x, la, y, lb, None, out)).into()));
        }
        (HostStorage::F16(x), HostStorage::F16(y), Some((HostStorage::F16(z), lc))) if widening::available() => {
            return Some(Ok(made::<half::f16>(la, lb, |out| widening::matmul(x, la, y, lb, Some((z, lc)), out)).into()));
        }
        // a mix of dtypes (the error below), or no vector kernel
        _ => {}
    }
    let mut inputs = vec![a, b];
    inputs.extend(init.map(|(c, _)| c));
    through_f32(&inputs, |w| match (w[0], w[1], w.get(2)) {
        (HostStorage::F32(x), HostStorage::F32(y), None) => Ok(matmul(x, la, y, lb, None).into()),
        (HostStorage::F32(x), HostStorage::F32(y), Some(HostStorage::F32(z))) => {
            let lc = init.expect("three inputs: an init").1;
            Ok(matmul(x, la, y, lb, Some((z, lc))).into())
        }
        _ => unreachable!("through_f32 widens every input to f32"),
    })
}

/// A validated product's output, written by `product`.
fn made<T: Copy + Default + Send + 'static>(la: &Layout, lb: &Layout, product: impl FnOnce(&mut [T])) -> Vec<T> {
    let mut out = shared::output(la, lb);
    product(&mut out);
    out
}

/// An f16 or bf16 product (validated), each output rounded to its dtype
/// as [`low_precision`] rounds it, returned widened to f32: the bits of
/// the product cast to f32 (`Backend::matmul_cast`), for a weight
/// gradient under autocast. The kernels round each sum in their epilogue
/// and store it widened ([`rounded::Rounded`] for `f32`): no
/// low-precision product lives beside the f32 one, and no pass over the
/// output widens it afterwards. `None` where no vector kernel runs the
/// product (below AVX2, mixed dtypes): the caller multiplies, then casts.
pub(crate) fn low_precision_widened(a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Option<Vec<f32>> {
    match (a, b) {
        (HostStorage::BF16(x), HostStorage::BF16(y)) => {
            let kernel = bf16_kernel::<f32>()?;
            Some(made(la, lb, |out| kernel(x, la, y, lb, None, out)))
        }
        (HostStorage::F16(x), HostStorage::F16(y)) if widening::available() => {
            Some(made(la, lb, |out| widening::matmul(x, la, y, lb, None, out)))
        }
        _ => None,
    }
}

/// A bf16 product kernel: operands, layouts, `addmm`'s bias and the
/// output it writes (rounded to bf16, stored as `O`).
type Bf16Kernel<O> = fn(&[half::bf16], &Layout, &[half::bf16], &Layout, Option<(&[half::bf16], &Layout)>, &mut [O]);

/// The fastest bf16 kernel here, `None` below AVX2.
fn bf16_kernel<O: rounded::Rounded<half::bf16>>() -> Option<Bf16Kernel<O>> {
    if amx::available() {
        Some(amx::matmul::<O>)
    } else if bf16::available() {
        Some(bf16::matmul::<O>)
    } else if widening::available() {
        Some(widening::matmul::<half::bf16, O>)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autograd_core::Shape;

    /// A column-major `B` across an aliasing stride (a weight of 256 or
    /// 512 columns read transposed) is copied row-major before the product
    /// where `gemm` runs AVX-512 kernels (`stage_columns`; here forced on
    /// and off, whatever the CPU), on one thread or in bands over three;
    /// with a batch (each matrix's own offset) and `addmm`'s bias: the
    /// products equal f64 sums of the same values either way. Every value
    /// is a multiple of 1/8 or 1/16 below 4 in size, so each product is a
    /// multiple of 1/128 and every partial sum (below 2^12) is exact in
    /// f32 in any order: the check is equality.
    #[test]
    fn products_on_a_staged_transposed_b_are_the_sums() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for &(nb, m, k, n, bias) in &[(1, 20, 256, 24, false), (2, 17, 512, 5, true), (1, 64, 512, 256, true), (1, 20, 250, 24, true)] {
            let a: Vec<f32> = (0..nb * m * k).map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0).collect();
            // B stored as [nb, n, k] and read transposed: column stride k
            let bt: Vec<f32> = (0..nb * n * k).map(|i: usize| ((i.wrapping_mul(2_654_435_761) % 97) as f32 - 48.0) / 16.0).collect();
            let c: Vec<f32> = (0..n).map(|j| j as f32 - 3.5).collect();
            let la = Layout::contiguous(Shape::from([nb, m, k]));
            let lb = Layout::contiguous(Shape::from([nb, n, k])).transpose(1, 2).unwrap();
            let lc = Layout::contiguous(Shape::from([n])).broadcast_as(&Shape::from([nb, m, n])).unwrap();
            let v = |l: &Layout| View { off: l.offset(), rs: l.strides()[1], cs: l.strides()[2] };
            assert_eq!(stage_columns::<f32>(true, m, k, n, v(&lb)), k % 256 == 0, "{m} x {k} x {n}");
            assert!(!stage_columns::<f32>(false, m, k, n, v(&lb)));
            assert!(!stage_columns::<f64>(true, m, k / 2, n, View { cs: k / 2, ..v(&lb) }), "f64 reads in place");
            for avx512 in [true, false] {
                let got = pool.install(|| matmul_staging(&a, &la, &bt, &lb, bias.then_some((&c[..], &lc)), avx512));
                for bi in 0..nb {
                    for i in 0..m {
                        for j in 0..n {
                            let sum: f64 = (0..k).map(|p| a[(bi * m + i) * k + p] as f64 * bt[(bi * n + j) * k + p] as f64).sum();
                            let want = sum + if bias { c[j] as f64 } else { 0.0 };
                            let g = got[(bi * m + i) * n + j] as f64;
                            assert_eq!(g, want, "{nb}x{m}x{k}x{n}, staged {avx512} ({bi}, {i}, {j})");
                        }
                    }
                }
            }
        }
    }

    /// Whether the register-blocked small product (`small.rs`, written for
    /// attention's blocks) would beat `gemm` on small matrices in general:
    /// both on the same contiguous operands, their sums checked against
    /// each other, the time of each printed. A measurement, so ignored:
    /// `cargo test --release -p autograd-cpu --lib small_product_against_gemm -- --ignored --nocapture`
    /// (results in benches/README.md: `gemm` wins from 8 x 8 x 8 up, so
    /// `matmul` keeps it for every shape).
    #[test]
    #[ignore]
    #[allow(clippy::print_stdout)] // the timings are the point
    fn small_product_against_gemm() {
        let shapes = [
            (3, 3, 3),
            (4, 4, 4),
            (6, 6, 6),
            (7, 7, 7),
            (8, 8, 8),
            (16, 16, 16),
            (32, 32, 32),
            (64, 64, 64),
            (128, 128, 128),
            (128, 32, 128),
            (64, 10, 128),
            (10, 20, 784),
        ];
        for &(m, n, k) in &shapes {
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
            let reps = (20_000_000 / (m * n * k)).max(3);
            let best = |f: &mut dyn FnMut()| {
                (0..5)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        (0..reps).for_each(|_| f());
                        t.elapsed().as_secs_f64() / reps as f64
                    })
                    .fold(f64::MAX, f64::min)
            };
            let (mut cg, mut cs) = (vec![0f32; m * n], vec![0f32; m * n]);
            let (ma, mb) = (View { off: 0, rs: k, cs: 1 }, View { off: 0, rs: n, cs: 1 });
            // SAFETY: cg is m x n; a is m x k and b k x n, both row-major
            let tg = best(&mut || unsafe { product(&mut cg, false, (m, n, k), &a, ma, &b, mb, 1) });
            let ts = best(&mut || {
                cs.fill(0.0);
                let (ai, bi) = (small::Strided { off: 0, rs: k, cs: 1 }, small::Rows { off: 0, ld: n });
                small::add_product((m, n, k), &a, ai, &b, bi, &mut cs, small::Rows { off: 0, ld: n });
            });
            // small integers times halves: every sum is exact in f32
            assert_eq!(cg, cs, "{m}x{n}x{k}");
            let gf = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e9;
            println!("{m} x {n} x {k}: gemm {:.1} GFLOP/s, small product {:.1} GFLOP/s, time small/gemm {:.2}", gf(tg), gf(ts), ts / tg);
        }
    }
}
