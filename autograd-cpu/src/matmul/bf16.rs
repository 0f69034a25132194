//! bf16 products on CPUs with AVX512_BF16 (Zen 4, Cooper Lake and later
//! Xeons): `vdpbf16ps` multiplies 32 bf16 pairs and adds them into 16 f32
//! lanes, twice the multiply-adds of an f32 FMA, with the accumulation in
//! f32 as PyTorch's CPU `mm` does. Chosen at run time
//! ([`available`]: the instruction set present and `AUTOGRAD_CPU_ISA` not
//! capping below AVX-512); elsewhere the operands are widened to f32 and
//! the f32 GEMM runs ([`super`]).
//!
//! Layout of the work, for `C (m x n) = A (m x k) B (k x n)`:
//! - `A` is packed once into rows of `k` rounded up to even (zero pad), so
//!   that each row is a run of 32-bit `(a[i][2p], a[i][2p+1])` pairs, one
//!   broadcast each.
//! - `B` is packed one panel of `NR` = 32 columns at a time into the same
//!   pairs, `(b[2p][j], b[2p+1][j])`, 32 of them (two vectors) per `p`:
//!   `k * 64` bytes, an L2-resident panel for every `k` the library meets.
//! - The micro-kernel keeps `MR x 32` f32 accumulators (up to 8 rows:
//!   16 of the 32 vector registers) over the whole `k`, then rounds each
//!   element once to bf16 (after adding `addmm`'s bias in f32).
//! - Panels are split over the rayon pool (each worker packs its own), so
//!   no worker writes another's columns.
//!
//! No transient f32 copy of an operand or of the output is made: the
//! memory a product needs is its packed operands (bf16-sized) and its bf16
//! output.

use super::shared::{GEMM_PAR_MIN_FLOPS_PER_THREAD, SendPtr, View};
use autograd_core::Layout;
use half::bf16;
use rayon::prelude::*;

/// Columns per panel: two 16-lane f32 vectors.
pub(crate) const NR: usize = 32;
/// Rows per micro-kernel call.
const MR: usize = 8;

/// Whether the bf16 kernel runs here: the CPU has AVX512_BF16 (and the
/// AVX-512 foundation), the active instruction set is not capped below
/// AVX-512 (`AUTOGRAD_CPU_ISA`, [`crate::simd::limit_isa`]), and the dot
/// products are faster than f32 FMAs on this CPU ([`dot_products_pay`]).
///
/// ```
/// // false on CPUs without the instruction (the f32 GEMM runs instead)
/// println!("bf16 dot products: {}", autograd_cpu::matmul::bf16::available());
/// ```
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::simd::active_isa() >= crate::simd::Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512bf16") && dot_products_pay()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `vdpbf16ps` beats f32 FMAs here, measured once per process.
///
/// CPUs differ: Zen 4 issues two 32-multiply-add dot products a cycle
/// (PyTorch's bf16 matmul runs 2.27x its f32 there), while the Sapphire
/// Rapids this library is developed on runs the same register-blocked
/// kernel at 0.65x of its f32 twin (72 vs 111 GFLOP/s, both in L1): Intel's
/// bf16 path there is AMX. So the choice is measured: the micro-kernel and
/// an f32 FMA loop of the same shape run on L1-resident zeros (about 0.1
/// ms each, best of 5), and the dot products are used only when they are
/// at least 1.2x faster, a margin that keeps the choice stable from run to
/// run (both paths stay within the accumulation bound).
///
/// ```
/// let _ = autograd_cpu::matmul::bf16::dot_products_pay();
/// ```
pub fn dot_products_pay() -> bool {
    static PAY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAY.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16") {
            let pairs = 64;
            let (a, b) = (vec![0u32; MR * pairs], vec![0u32; pairs * NR]);
            let (af, bf) = (vec![0f32; MR * 2 * pairs], vec![0f32; 2 * pairs * NR]);
            let mut tile = [0f32; MR * NR];
            let best = |f: &mut dyn FnMut()| {
                (0..5)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        for _ in 0..50 {
                            f();
                        }
                        t.elapsed()
                    })
                    .min()
                    .unwrap_or_default()
            };
            // SAFETY: both features were detected above; the buffers have the sizes the kernels read.
            let dot = best(&mut || unsafe { x86::kernel::<MR>(std::hint::black_box(&a), pairs, &b, &mut tile) });
            let fma = best(&mut || unsafe { x86::kernel_f32(std::hint::black_box(&af), 2 * pairs, &bf, &mut tile) });
            return dot.as_secs_f64() * 1.2 < fma.as_secs_f64();
        }
        false
    })
}

/// The dot-product kernel itself, whatever [`dot_products_pay`] chose:
/// `a @ b` (+ `init`) for validated layouts of bf16 slices, or `None` on a
/// CPU without AVX512_BF16. For tests and benchmarks; products go through
/// [`autograd_core::Backend::matmul`].
///
/// ```
/// use autograd_core::{Layout, Shape};
/// use half::bf16;
/// let one = vec![bf16::ONE; 4];
/// let l = Layout::contiguous(Shape::from([2, 2]));
/// if let Some(c) = autograd_cpu::matmul::bf16::matmul_with_dot_products(&one, &l, &one, &l, None).unwrap() {
///     assert_eq!(c, vec![bf16::from_f32(2.0); 4]);
/// }
/// ```
pub fn matmul_with_dot_products(
    a: &[bf16],
    la: &Layout,
    b: &[bf16],
    lb: &Layout,
    init: Option<(&[bf16], &Layout)>,
) -> autograd_core::Result<Option<Vec<bf16>>> {
    super::shared::validate_bf16_product(a, la, b, lb, init)?;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16") {
        return Ok(Some(matmul(a, la, b, lb, init)));
    }
    Ok(None)
}

/// `[batch.., m, k] x [batch.., k, n]` (+ `init`, of the output's shape,
/// stride 0 where broadcast) in bf16 with f32 accumulation. The caller
/// checked [`available`] and validated every layout against its slice
/// (`validate::matmul`/`addmm`), as for [`crate::matmul`]; every index
/// below is a checked slice index.
pub(crate) fn matmul(a: &[bf16], la: &Layout, b: &[bf16], lb: &Layout, init: Option<(&[bf16], &Layout)>) -> Vec<bf16> {
    let r = la.rank();
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let batch_dims = &la.dims()[..r - 2];
    let nb: usize = batch_dims.iter().product();
    let mut out = vec![bf16::ZERO; nb * m * n];
    if out.is_empty() {
        return out;
    }
    let view = |bi: usize, l: &Layout| View::of(l, bi, batch_dims);
    for (bi, dst) in out.chunks_mut(m * n).enumerate() {
        let c = init.map(|(c, lc)| (c, view(bi, lc)));
        product(dst, (m, k, n), a, view(bi, la), b, view(bi, lb), c);
    }
    out
}

/// One `m x k` by `k x n` product into the row-major `dst`.
fn product(dst: &mut [bf16], (m, k, n): (usize, usize, usize), a: &[bf16], va: View, b: &[bf16], vb: View, c: Option<(&[bf16], View)>) {
    let pairs = k.div_ceil(2);
    // A as rows of 32-bit pairs (zero-padded to even k)
    let mut ap = vec![0u32; m * pairs];
    for i in 0..m {
        for p in 0..pairs {
            let lo = a[va.off + i * va.rs + 2 * p * va.cs].to_bits() as u32;
            let hi = if 2 * p + 1 < k { a[va.off + i * va.rs + (2 * p + 1) * va.cs].to_bits() as u32 } else { 0 };
            ap[i * pairs + p] = lo | (hi << 16);
        }
    }
    let panels = n.div_ceil(NR);
    let threads = rayon::current_num_threads().min((m * n * k) / GEMM_PAR_MIN_FLOPS_PER_THREAD).min(panels).max(1);
    let out = SendPtr(dst.as_mut_ptr());
    let run = |range: std::ops::Range<usize>| {
        let out = &out;
        let mut bp = vec![0u32; pairs * NR];
        let mut tile = [0f32; MR * NR];
        for panel in range {
            let j0 = panel * NR;
            let cols = NR.min(n - j0);
            // B's panel as pairs along k, zero beyond its columns and k
            for p in 0..pairs {
                for jj in 0..NR {
                    bp[p * NR + jj] = if jj < cols {
                        let at = |kk: usize| b[vb.off + kk * vb.rs + (j0 + jj) * vb.cs].to_bits() as u32;
                        at(2 * p) | if 2 * p + 1 < k { at(2 * p + 1) << 16 } else { 0 }
                    } else {
                        0
                    };
                }
            }
            for i0 in (0..m).step_by(MR) {
                let rows = MR.min(m - i0);
                kernel(&ap[i0 * pairs..(i0 + rows) * pairs], pairs, rows, &bp, &mut tile);
                for ii in 0..rows {
                    for jj in 0..cols {
                        let (i, j) = (i0 + ii, j0 + jj);
                        let mut v = tile[ii * NR + jj];
                        if let Some((c, vc)) = c {
                            v += c[vc.off + i * vc.rs + j * vc.cs].to_f32();
                        }
                        // SAFETY: (i, j) is inside the m x n `dst` (i < m,
                        // j < n), and this worker's panels are the only
                        // ones writing columns j0..j0 + cols.
                        unsafe { *out.0.add(i * n + j) = bf16::from_f32(v) };
                    }
                }
            }
        }
    };
    if threads == 1 {
        run(0..panels);
    } else {
        let per = panels.div_ceil(threads);
        (0..threads).into_par_iter().for_each(|t| run((t * per).min(panels)..((t + 1) * per).min(panels)));
    }
}

/// `tile[r][j] = sum_p a[r][p] . b[p][j]` for `rows <= MR` rows of packed
/// pairs (`a`: `rows * pairs`, `b`: `pairs * NR`), f32 accumulation.
fn kernel(a: &[u32], pairs: usize, rows: usize, b: &[u32], tile: &mut [f32; MR * NR]) {
    assert!(rows <= MR && a.len() >= rows * pairs && b.len() >= pairs * NR, "packed operands of the checked sizes");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `available()` (the caller's precondition) proved avx512f and
    // avx512bf16; the sizes were asserted above.
    unsafe {
        match rows {
            1 => x86::kernel::<1>(a, pairs, b, tile),
            2 => x86::kernel::<2>(a, pairs, b, tile),
            3 => x86::kernel::<3>(a, pairs, b, tile),
            4 => x86::kernel::<4>(a, pairs, b, tile),
            5 => x86::kernel::<5>(a, pairs, b, tile),
            6 => x86::kernel::<6>(a, pairs, b, tile),
            7 => x86::kernel::<7>(a, pairs, b, tile),
            _ => x86::kernel::<8>(a, pairs, b, tile),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("available() is false off x86_64");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// The f32 twin of [`kernel`] (`MR` rows, `k` multiply-adds per
    /// element), for [`super::dot_products_pay`]'s comparison only.
    ///
    /// # Safety
    /// The CPU has avx512f; `a` holds `MR * k` values and `b` `k * NR`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn kernel_f32(a: &[f32], k: usize, b: &[f32], tile: &mut [f32; MR * NR]) {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for p in 0..k {
            // SAFETY: p < k: b[p * NR .. p * NR + 32] and a[r * k + p] (r < MR) are in bounds.
            unsafe {
                let b0 = _mm512_loadu_ps(b.as_ptr().add(p * NR));
                let b1 = _mm512_loadu_ps(b.as_ptr().add(p * NR + 16));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.as_ptr().add(r * k + p));
                    acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: r < MR: both stores are inside the tile.
            unsafe {
                _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR), acc[0]);
                _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR + 16), acc[1]);
            }
        }
    }

    /// # Safety
    /// The CPU has avx512f and avx512bf16; `a` holds `R * pairs` pairs and
    /// `b` `pairs * NR` (so every load below is inside them).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn kernel<const R: usize>(a: &[u32], pairs: usize, b: &[u32], tile: &mut [f32; MR * NR]) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for p in 0..pairs {
            // SAFETY: p < pairs, so b[p * NR .. p * NR + 32] and a[r * pairs + p] (r < R) are in bounds.
            unsafe {
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR) as *const _));
                let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR + 16) as *const _));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r * pairs + p) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: r < R <= MR, so both 16-lane stores are inside the MR x NR tile.
            unsafe {
                _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR), acc[0]);
                _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR + 16), acc[1]);
            }
        }
    }
}
