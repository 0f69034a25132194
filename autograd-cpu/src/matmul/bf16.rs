//! bf16 products on CPUs with AVX512_BF16 (Zen 4, Cooper Lake and later
//! Xeons): `vdpbf16ps` multiplies 32 bf16 pairs and adds them into 16 f32
//! lanes, twice the multiply-adds of an f32 FMA, with the accumulation in
//! f32 as PyTorch's CPU `mm` does. Chosen at run time
//! ([`available`]: the instruction set present and `AUTOGRAD_CPU_ISA` not
//! capping below AVX-512, and [`dot_products_pay`]); elsewhere the f32
//! FMA kernel runs on operands converted while packed ([`super::widening`]).
//!
//! The blocking, the split over threads and the epilogue are the blocked
//! driver's (`matmul/blocked.rs`); here are the packing and the
//! micro-kernel: both operands packed as 32-bit `(x[2s], x[2s + 1])`
//! pairs along `k` (zero past `k`), `MR x NR` = 8 x 32 f32 sums in
//! sixteen registers, each step two vector loads of `B`'s pairs and one
//! broadcast pair of `A` per row.
//!
//! No transient f32 copy of an operand or of the output is made: the
//! memory a product needs is its packed blocks (bf16-sized) and its bf16
//! output.

use super::blocked::{self, Geometry, Lines, MicroKernel, Rows};
use super::rounded::Rounded;
use autograd_core::Layout;
use half::bf16;

/// Rows per micro-kernel call.
const MR: usize = 8;
/// Columns per panel: two 16-lane f32 vectors.
const NR: usize = 32;
/// The tile: 8 x 32 sums in sixteen of AVX-512's thirty-two registers;
/// `k` walked 256 at a time (a micro-panel of `B`'s pairs: 16 KiB).
const DOT: Geometry = Geometry { mr: MR, nr: NR, kc: 256 };
// the kernel's sums live in the 8 x 32 registers of `widening::x86::sums_512`
const _: () = assert!(MR == 8 && NR == 32);

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
/// the packed f32 FMA kernel of the same tile (the alternative,
/// [`super::widening`]) run on L1-resident zeros (about 0.1 ms each, best
/// of 5), and the dot products are used only when they are
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
            let dot = best(&mut || unsafe { x86::kernel::<bf16, MR>(std::hint::black_box(&a), &b, pairs, false, &mut tile, None) });
            let fma = best(&mut || unsafe {
                super::widening::x86::kernel_avx512::<bf16, bf16, 8>(std::hint::black_box(&af), &bf, 2 * pairs, false, &mut tile, None)
            });
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
        let mut out = super::shared::output(la, lb);
        matmul(a, la, b, lb, init, &mut out);
        return Ok(Some(out));
    }
    Ok(None)
}

/// `[batch.., m, k] x [batch.., k, n]` (+ `init`, of the output's shape,
/// stride 0 where broadcast) in bf16 with f32 accumulation. The caller
/// checked [`available`] (or, for the test entry, the instructions) and
/// validated every layout against its slice (`validate::matmul`/`addmm`),
/// as for [`crate::matmul`]; `out` is the output's `nb * m * n` elements
/// (rounded to bf16, stored as `O`: see [`Rounded`]).
pub(crate) fn matmul<O: Rounded<bf16>>(a: &[bf16], la: &Layout, b: &[bf16], lb: &Layout, init: Option<(&[bf16], &Layout)>, out: &mut [O]) {
    blocked::matmul(&DotProducts, a, la, b, lb, init, out)
}

/// The `vdpbf16ps` micro-kernel on pairs of bf16.
struct DotProducts;

impl MicroKernel<bf16> for DotProducts {
    type Packed = u32;
    const STEP: usize = 2;

    fn geometry(&self) -> Geometry {
        DOT
    }

    fn pack(&self, src: &[bf16], v: Lines, w: usize, q: usize, dst: &mut [u32], block: &mut [u32]) {
        pack_pairs(src, v, w, q, dst, block)
    }

    fn kernel<O: Rounded<bf16>>(
        &self,
        a: &[u32],
        b: &[u32],
        pairs: usize,
        accumulate: bool,
        tile: &mut [f32],
        into: Option<Rows<'_, '_, O>>,
    ) {
        assert!(a.len() >= pairs * MR && b.len() >= pairs * NR && tile.len() >= MR * NR, "packed micro-panels of the checked sizes");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is chosen only where avx512f and avx512bf16
        // were detected (`available()`, or the test entry's own check);
        // the sizes were asserted above (those of `into` by its epilogue).
        unsafe {
            x86::kernel::<O, MR>(a, b, pairs, accumulate, tile, into)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("available() is false off x86_64");
    }

    fn kernel_rows(&self, a: &[u32], b: &[u32], pairs: usize, accumulate: bool, tile: &mut [f32], height: usize) {
        assert!(a.len() >= pairs * MR && b.len() >= pairs * NR && tile.len() >= MR * NR, "packed micro-panels of the checked sizes");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `kernel`; every `R` is at most MR.
        unsafe {
            let none = None::<Rows<'_, '_, bf16>>;
            blocked::with_rows!(height, MR, R => x86::kernel::<bf16, R>(a, b, pairs, accumulate, tile, none))
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("available() is false off x86_64");
    }
}

/// A pair of bf16 as `vdpbf16ps` and `tdpbf16ps` read it: `lo` in the
/// low half (the AMX packing builds the same pairs).
#[inline(always)]
pub(super) fn pair(lo: bf16, hi: bf16) -> u32 {
    lo.to_bits() as u32 | (hi.to_bits() as u32) << 16
}

crate::simd::multiversion! {
    /// Group `q` (lines `q w ..`) of `v` into `dst` as pairs along `k`:
    /// `dst[s w + o]` holds line `q w + o` at `k` steps `2s, 2s + 1`, zero
    /// past `v.lines` and `v.k`. The loops follow the source's memory.
    fn pack_pairs<>(src: &[bf16], v: Lines, w: usize, q: usize, dst: &mut [u32], block: &mut [u32]) where [] {
        let (first, lines) = (q * w, w.min(v.lines - q * w));
        let get = |o: usize, p: usize| if p < v.k { src[v.off + (first + o) * v.so + p * v.sk] } else { bf16::ZERO };
        if lines < w {
            dst.fill(0);
        }
        if v.so == 1 {
            // adjacent lines: two k rows at a time, across the group's lines
            for (s, row) in dst.chunks_exact_mut(w).enumerate() {
                let (k0, k1) = (2 * s, 2 * s + 1);
                let x = &src[v.off + first + k0 * v.sk..][..lines];
                if k1 < v.k {
                    let y = &src[v.off + first + k1 * v.sk..][..lines];
                    for (d, (&x, &y)) in row.iter_mut().zip(x.iter().zip(y)) {
                        *d = pair(x, y);
                    }
                } else {
                    for (d, &x) in row.iter_mut().zip(x) {
                        *d = pair(x, bf16::ZERO);
                    }
                }
            }
        } else if v.sk == 1 {
            // each line's k elements adjacent: its pairs a run at a time
            // into a block, transposed into the packed rows; an odd k's
            // last element pairs with zero
            let full = v.k / 2;
            blocked::pack_through_block(lines, w, full, dst, block, |o, s0, run| {
                let line = &src[v.off + (first + o) * v.so + 2 * s0..][..2 * run.len()];
                for (d, p) in run.iter_mut().zip(line.chunks_exact(2)) {
                    *d = pair(p[0], p[1]);
                }
            });
            if v.k % 2 == 1 {
                for o in 0..lines {
                    dst[full * w + o] = pair(src[v.off + (first + o) * v.so + v.k - 1], bf16::ZERO);
                }
            }
        } else {
            for s in 0..v.k.div_ceil(2) {
                for o in 0..lines {
                    dst[s * w + o] = pair(get(o, 2 * s), get(o, 2 * s + 1));
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::blocked::Rows;
    use super::super::rounded::Rounded;
    use super::super::widening::x86::{finish_512, store_512, sums_512};
    use super::{MR, NR};
    use half::bf16;
    use std::arch::x86_64::*;

    /// The first `R` rows of the tile (all `MR`, or those of a block's
    /// last tile inside `C`); the other rows of `tile` are neither read
    /// nor written.
    ///
    /// # Safety
    /// The CPU has avx512f and avx512bf16; `a` holds `MR * pairs` pairs,
    /// `b` `pairs * NR` and `tile` `MR * NR` f32 (so every load below is
    /// inside them); `R <= MR`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn kernel<O: Rounded<bf16>, const R: usize>(
        a: &[u32],
        b: &[u32],
        pairs: usize,
        accumulate: bool,
        tile: &mut [f32],
        into: Option<Rows<'_, '_, O>>,
    ) {
        const { assert!(R <= MR) };
        let mut acc = sums_512::<R>(tile, accumulate);
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for p in 0..pairs {
            // SAFETY: p < pairs, so b[p NR .. p NR + 32] and a[p MR + r] (r < R <= MR) are in bounds.
            unsafe {
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR) as *const _));
                let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR + 16) as *const _));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(p * MR + r) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
                }
            }
        }
        match into {
            None => store_512(&acc, tile),
            Some(into) => finish_512!(bf16, O, &acc, into),
        }
    }
}
