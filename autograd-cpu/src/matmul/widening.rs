//! f16 and bf16 products on f32 FMA micro-kernels, the operands converted
//! to f32 while they are packed: no f32 copy of a whole operand, and one
//! pass over each operand where widening them first (and letting the f32
//! GEMM pack its copies) took three. The path of every CPU with AVX2 but
//! no faster bf16 instruction (Zen 3 and older, or an ISA cap), and of f16
//! on every CPU with AVX2 (no CPU this library targets multiplies f16 in
//! hardware; `amx_fp16` is Granite Rapids').
//!
//! Numerics, as PyTorch's CPU `mm` for both dtypes: the rounded inputs
//! widened exactly, every product added into an f32 accumulator,
//! `addmm`'s bias added in f32, one rounding per output.
//!
//! The blocking, the split over threads and the epilogue are the blocked
//! driver's (`matmul/blocked.rs`); here are the packing into f32
//! micro-panels and the micro-kernels: 6 x 16 sums in twelve AVX2 registers, 8 x 32 in sixteen
//! AVX-512 ones, each step one broadcast of `A` per row and two vector
//! loads of `B`, and a whole tile's epilogue from those registers
//! (`x86::finish_in_registers!`).

use super::blocked::{self, Geometry, Lines, MicroKernel, Rows};
use super::rounded::Rounded;
use crate::low_elementwise::Low;
use autograd_core::Layout;

/// Twelve of AVX2's sixteen registers of sums (two 8-lane vectors per
/// row); a `kc x NR` micro-panel of `B` is 16 KiB, half of L1.
const AVX2: Geometry = Geometry { mr: 6, nr: 16, kc: 256 };
/// Sixteen of AVX-512's thirty-two (two 16-lane vectors per row): the
/// 8 x 32 tile of `x86::sums_512`.
const AVX512: Geometry = Geometry { mr: 8, nr: 32, kc: 128 };

/// The tile of the active instruction set; `None` below AVX2 (the caller
/// widens the operands and runs the f32 GEMM there).
fn geometry() -> Option<Geometry> {
    use crate::simd::{Isa, active_isa};
    match active_isa() {
        Isa::Avx512 | Isa::Amx => Some(AVX512),
        Isa::Avx2 => Some(AVX2),
        Isa::Baseline => None,
    }
}

/// Whether f16 and bf16 products can run here (AVX2 and FMA present and
/// not capped away by `AUTOGRAD_CPU_ISA`).
///
/// ```
/// println!("low-precision products packed into f32 kernels: {}", autograd_cpu::matmul::widening::available());
/// ```
pub fn available() -> bool {
    geometry().is_some()
}

/// The kernel itself, for tests and benchmarks: `a @ b` (+ `init`) for
/// f16 or bf16 slices and layouts (validated here as the backend validates
/// them), or `Ok(None)` when [`available`] is false. Products otherwise go
/// through [`autograd_core::Backend::matmul`], which picks this kernel
/// where no faster one exists.
///
/// ```
/// use autograd_core::{Layout, Shape};
/// use half::f16;
/// let one = vec![f16::ONE; 4];
/// let l = Layout::contiguous(Shape::from([2, 2]));
/// if let Some(c) = autograd_cpu::matmul::widening::matmul_packed(&one, &l, &one, &l, None).unwrap() {
///     assert_eq!(c, vec![f16::from_f32(2.0); 4]);
/// }
/// ```
#[allow(private_bounds)] // implemented for half::f16 and half::bf16 only
pub fn matmul_packed<T: Low>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    init: Option<(&[T], &Layout)>,
) -> autograd_core::Result<Option<Vec<T>>> {
    super::shared::validate_low_product(T::DTYPE, a.len(), la, b.len(), lb, init.map(|(c, lc)| (c.len(), lc)))?;
    Ok(available().then(|| {
        let mut out = super::shared::output(la, lb);
        matmul(a, la, b, lb, init, &mut out);
        out
    }))
}

/// `[batch.., m, k] x [batch.., k, n]` (+ `init`, of the output's shape,
/// stride 0 where broadcast). The caller checked [`available`] and
/// validated every layout against its slice (`validate::matmul`/`addmm`),
/// as for [`super::matmul`]; `out` is the output's `nb * m * n` elements
/// (rounded to `T`, stored as `O`: see [`Rounded`]).
pub(crate) fn matmul<T: Low, O: Rounded<T>>(a: &[T], la: &Layout, b: &[T], lb: &Layout, init: Option<(&[T], &Layout)>, out: &mut [O]) {
    let g = geometry().expect("the caller checked available()");
    blocked::matmul(&Fma(g), a, la, b, lb, init, out)
}

/// The f32 FMA micro-kernel of one geometry ([`AVX2`] or [`AVX512`], the
/// active instruction set's).
struct Fma(Geometry);

impl<T: Low> MicroKernel<T> for Fma {
    type Packed = f32;
    const STEP: usize = 1;

    fn geometry(&self) -> Geometry {
        self.0
    }

    fn pack(&self, src: &[T], v: Lines, w: usize, q: usize, dst: &mut [f32], block: &mut [f32]) {
        pack(src, v, w, q, dst, block)
    }

    fn kernel<O: Rounded<T>>(&self, a: &[f32], b: &[f32], k: usize, accumulate: bool, tile: &mut [f32], into: Option<Rows<'_, '_, O>>) {
        let g = self.0;
        assert!(a.len() >= k * g.mr && b.len() >= k * g.nr && tile.len() >= g.mr * g.nr, "packed micro-panels of the checked sizes");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `geometry()` returned `g` for the active instruction
        // set, which never exceeds what the CPU has (AVX-512 F for AVX512;
        // AVX2, FMA and F16C for AVX2); the lengths were asserted above,
        // those of `into` are asserted by the kernels' epilogues.
        unsafe {
            if g == AVX512 {
                x86::kernel_avx512::<T, O, 8>(a, b, k, accumulate, tile, into)
            } else {
                x86::kernel_avx2::<T, O, 6>(a, b, k, accumulate, tile, into)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("geometry() is None off x86_64");
    }

    fn kernel_rows(&self, a: &[f32], b: &[f32], k: usize, accumulate: bool, tile: &mut [f32], height: usize) {
        let g = self.0;
        assert!(a.len() >= k * g.mr && b.len() >= k * g.nr && tile.len() >= g.mr * g.nr, "packed micro-panels of the checked sizes");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `kernel`; every `R` below is at most the
        // geometry's MR (a height past it takes the whole tile).
        unsafe {
            let none = None::<Rows<'_, '_, T>>;
            if g == AVX512 {
                blocked::with_rows!(height, AVX512.mr, R => x86::kernel_avx512::<T, T, R>(a, b, k, accumulate, tile, none))
            } else {
                blocked::with_rows!(height, AVX2.mr, R => x86::kernel_avx2::<T, T, R>(a, b, k, accumulate, tile, none))
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("geometry() is None off x86_64");
    }
}

crate::simd::multiversion! {
    /// Group `q` (lines `q w ..`) of `v` into `dst` (`w k` f32), widened:
    /// `dst[p w + o] = v(q w + o, p)`, zero for lines past `v.lines`.
    /// Compiled per instruction set so that the widening vectorises; the
    /// loops follow the source's memory (across lines when they are
    /// adjacent, along each line when its `k` elements are).
    fn pack<T>(src: &[T], v: Lines, w: usize, q: usize, dst: &mut [f32], block: &mut [f32]) where [T: Low] {
        let (first, lines) = (q * w, w.min(v.lines - q * w));
        if lines < w {
            dst.fill(0.0);
        }
        if v.so == 1 {
            // a full group at a tile's width: fixed-length rows, which the
            // compiler widens in straight-line vector code (a row of 6 or
            // 16 through the general loop is mostly its remainder)
            match (lines == w, w) {
                (true, 6) => widen_rows::<T, 6>(src, v, first, dst),
                (true, 16) => widen_rows::<T, 16>(src, v, first, dst),
                (true, 32) => widen_rows::<T, 32>(src, v, first, dst),
                _ => {
                    for (p, row) in dst.chunks_exact_mut(w).enumerate() {
                        let at = v.off + first + p * v.sk;
                        T::widen(&src[at..at + lines], &mut row[..lines]);
                    }
                }
            }
        } else if v.sk == 1 {
            // each line's k elements adjacent: transposed 8 x 8 in
            // registers as they are widened
            #[cfg(target_arch = "x86_64")]
            {
                let _ = block;
                // SAFETY: an `Fma` kernel, the only caller, exists where
                // `geometry()` is `Some`: AVX2 and F16C present (the
                // `Avx2` level's features, checked by `simd`).
                unsafe { x86::pack_lines(src, v, first, lines, w, dst) }
            }
            #[cfg(not(target_arch = "x86_64"))]
            blocked::pack_through_block(lines, w, v.k, dst, block, |o, p0, run| {
                let line = v.off + (first + o) * v.so + p0;
                T::widen(&src[line..line + run.len()], run);
            });
        } else {
            for p in 0..v.k {
                for o in 0..lines {
                    dst[p * w + o] = src[v.off + (first + o) * v.so + p * v.sk].to_f32();
                }
            }
        }
    }
}

/// [`pack`]'s rows for lines adjacent in memory, `W` of them (a whole
/// group): `dst[p W + o] = src[v.off + first + o + p v.sk]`.
#[inline(always)]
fn widen_rows<T: Low, const W: usize>(src: &[T], v: Lines, first: usize, dst: &mut [f32]) {
    for (p, row) in dst.chunks_exact_mut(W).enumerate() {
        let at = v.off + first + p * v.sk;
        let (from, to): (&[T; W], &mut [f32; W]) = (src[at..at + W].try_into().expect("W elements"), row.try_into().expect("W values"));
        T::widen(from, to);
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{AVX2, AVX512};
    use crate::low_elementwise::Low;
    use crate::matmul::blocked::{Lines, Rows};
    use crate::matmul::rounded::Rounded;
    use crate::transpose::transpose8;
    use std::arch::x86_64::*;

    /// [`super::pack`]'s group of `lines` lines (from line `first` of
    /// `v`, each contiguous along `k`: `v.sk == 1`) into `dst`'s rows of
    /// `w`: eight lines by eight steps at a time, each line's eight
    /// elements loaded and widened in one register and the block
    /// transposed in registers (`transpose8`) into eight rows. Widening
    /// runs into a block and transposing the block (the packing before)
    /// made two passes over the values: `[128, 512] x [512, 10]` in bf16
    /// (`A` packed whole for one panel of `B`) took 42 us, now 35 (the f32
    /// GEMM's 21), and the packing of an autocast(BF16) MLP step on AVX2
    /// fell from 14-15% to 12.6-13.6% of its kernels' time (benches/README,
    /// "One pass for a transposing pack"). Rows are stored in order as
    /// whole registers: with `w < 8` (the 6-row panels of `A`) the two
    /// lanes past a row land on the next row's start and are overwritten
    /// by its store; a register that would pass the end of the group (or,
    /// with `w > 8`, of its row) goes through a stack copy. Lines past
    /// `lines` are read as zeros. Panics unless `1 <= lines <= w`, `dst`
    /// holds `w k` values and every line lies inside `src`.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn pack_lines<T: Low>(src: &[T], v: Lines, first: usize, lines: usize, w: usize, dst: &mut [f32]) {
        let k = v.k;
        assert!((1..=w).contains(&lines), "a group of 1 to w lines");
        let dst = &mut dst[..w.checked_mul(k).expect("w k packed values")];
        // line `o`'s first element; offsets grow with `o` (so >= 0), so
        // the last line bounds them all (checked: the unchecked offsets
        // below are then at most this one's)
        let last = (first + lines - 1).checked_mul(v.so).and_then(|o| o.checked_add(v.off)).and_then(|o| o.checked_add(k));
        assert!(last.is_some_and(|end| end <= src.len()), "every line inside the operand");
        let start = |o: usize| v.off + (first + o) * v.so;
        let full = k / 8 * 8;
        for o0 in (0..lines).step_by(8) {
            let count = (lines - o0).min(8);
            // lanes of a row this block fills: 8, or the rest of the row
            let width = (w - o0).min(8);
            for p0 in (0..full).step_by(8) {
                let mut r = [_mm256_setzero_ps(); 8];
                for (j, r) in r.iter_mut().enumerate().take(count) {
                    // SAFETY: p0 + 8 <= k and line o0 + j < lines: eight
                    // elements inside the operand (asserted above).
                    *r = unsafe { T::widened_8(src.as_ptr().add(start(o0 + j) + p0)) };
                }
                for (i, v) in transpose8(r).into_iter().enumerate() {
                    let at = (p0 + i) * w + o0;
                    if at + 8 <= dst.len() && (width == 8 || o0 == 0) {
                        // SAFETY: eight lanes from `at`, inside `dst`.
                        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(at), v) };
                    } else {
                        let mut lanes = [0f32; 8];
                        // SAFETY: `lanes` holds eight f32.
                        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
                        dst[at..at + width].copy_from_slice(&lanes[..width]);
                    }
                }
            }
        }
        // the last k % 8 steps
        for p in full..k {
            for o in 0..lines {
                dst[p * w + o] = src[start(o) + p].to_f32();
            }
        }
    }

    /// The first `R` rows (all six, or the rows of a block's last tile
    /// that lie inside `C`) of the 6 x 16 tile: the other rows of `tile`
    /// are neither read nor written.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `a` holds `6 k` f32, `b` `16 k` and
    /// `tile` `6 x 16`; `R <= 6`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn kernel_avx2<T: Low, O: Rounded<T>, const R: usize>(
        a: &[f32],
        b: &[f32],
        k: usize,
        accumulate: bool,
        tile: &mut [f32],
        into: Option<Rows<'_, '_, O>>,
    ) {
        const MR: usize = AVX2.mr;
        const NR: usize = AVX2.nr;
        const { assert!(R <= MR) };
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        if accumulate {
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: r < R <= MR: both loads are inside the tile.
                unsafe {
                    acc[0] = _mm256_loadu_ps(tile.as_ptr().add(r * NR));
                    acc[1] = _mm256_loadu_ps(tile.as_ptr().add(r * NR + 8));
                }
            }
        }
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for p in 0..k {
            // SAFETY: p < k: b[p NR .. p NR + 16] and a[p MR + r] (r < R <= MR) are inside the asserted lengths.
            unsafe {
                let b0 = _mm256_loadu_ps(bp.add(p * NR));
                let b1 = _mm256_loadu_ps(bp.add(p * NR + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*ap.add(p * MR + r));
                    acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
                }
            }
        }
        let Some(into) = into else {
            for (r, acc) in acc.iter().enumerate() {
                // SAFETY: r < R <= MR: both stores are inside the MR x NR tile.
                unsafe {
                    _mm256_storeu_ps(tile.as_mut_ptr().add(r * NR), acc[0]);
                    _mm256_storeu_ps(tile.as_mut_ptr().add(r * NR + 8), acc[1]);
                }
            }
            return;
        };
        finish_in_registers!(T, O, &acc, into, 8, _mm256_loadu_ps, _mm256_add_ps, round_store_8);
    }

    /// The first `R` rows of the 8 x 32 tile, as [`kernel_avx2`].
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `a` holds `8 k` f32, `b` `32 k` and `tile`
    /// `8 x 32`; `R <= 8`.
    #[target_feature(enable = "avx512f")]
    pub(in crate::matmul) unsafe fn kernel_avx512<T: Low, O: Rounded<T>, const R: usize>(
        a: &[f32],
        b: &[f32],
        k: usize,
        accumulate: bool,
        tile: &mut [f32],
        into: Option<Rows<'_, '_, O>>,
    ) {
        const MR: usize = AVX512.mr;
        const NR: usize = AVX512.nr;
        const { assert!(R <= MR) };
        let mut acc = sums_512::<R>(tile, accumulate);
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for p in 0..k {
            // SAFETY: p < k: b[p NR .. p NR + 32] and a[p MR + r] (r < R <= MR) are inside the asserted lengths.
            unsafe {
                let b0 = _mm512_loadu_ps(bp.add(p * NR));
                let b1 = _mm512_loadu_ps(bp.add(p * NR + 16));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*ap.add(p * MR + r));
                    acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                }
            }
        }
        match into {
            None => store_512(&acc, tile),
            Some(into) => finish_512!(T, O, &acc, into),
        }
    }

    /// The first `R` rows of an 8 x 32 tile of f32 sums in AVX-512
    /// registers (two per row; sixteen for the whole tile): read from
    /// `tile` when `accumulate`, else zero. Shared by the FMA and the
    /// dot-product kernels; panics if `tile` is shorter.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(in crate::matmul) fn sums_512<const R: usize>(tile: &[f32], accumulate: bool) -> [[__m512; 2]; R] {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        if accumulate {
            for (acc, row) in acc.iter_mut().zip(tile[..R * 32].chunks_exact(32)) {
                // SAFETY: `row` holds 32 f32: two 16-lane loads.
                unsafe {
                    acc[0] = _mm512_loadu_ps(row.as_ptr());
                    acc[1] = _mm512_loadu_ps(row.as_ptr().add(16));
                }
            }
        }
        acc
    }

    /// [`sums_512`]'s registers written back to `tile`, row by row.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(in crate::matmul) fn store_512<const R: usize>(acc: &[[__m512; 2]; R], tile: &mut [f32]) {
        for (acc, row) in acc.iter().zip(tile[..R * 32].chunks_exact_mut(32)) {
            // SAFETY: `row` holds 32 f32: two 16-lane stores.
            unsafe {
                _mm512_storeu_ps(row.as_mut_ptr(), acc[0]);
                _mm512_storeu_ps(row.as_mut_ptr().add(16), acc[1]);
            }
        }
    }

    /// A tile's registers (`acc`: rows of two vectors of `$lanes` f32)
    /// finished into its rows of `C` (`into`, a `Rows` of `$o`: one row
    /// per register row, `2 $lanes` elements each, asserted), the bias
    /// added when there is one, each row rounded to `$t` and stored as
    /// `$o` by `Rounded::$store`, as `finish_tile` rounds it. One definition for the AVX2 and the AVX-512 tiles,
    /// expanded inside each kernel: as a function, whether it was inlined
    /// was the compiler's choice, and an unrelated change to the crate
    /// once made it a call (the sums spilled to the stack to pass them, a
    /// 1-3% slower bf16 MLP step). The caller has the features `$load`,
    /// `$add` and `T::$store` need.
    macro_rules! finish_in_registers {
        ($t:ty, $o:ty, $acc:expr, $into:expr, $lanes:literal, $load:ident, $add:ident, $store:ident) => {{
            let (acc, into): (&[[_; 2]], Rows<'_, '_, _>) = ($acc, $into);
            assert!(into.rows.len() == acc.len() && into.rows.iter().all(|r| r.len() == 2 * $lanes), "a whole tile's rows");
            // no bias: the sums as they are (adding zero would turn -0 into +0)
            let bias = into.bias.map(|bias| {
                assert_eq!(bias.len(), 2 * $lanes, "one bias per column");
                // SAFETY: two loads of `$lanes` of the asserted `2 $lanes` values.
                unsafe { [$load(bias.as_ptr()), $load(bias.as_ptr().add($lanes))] }
            });
            for (acc, row) in acc.iter().zip(into.rows.iter_mut()) {
                let v = bias.map_or(*acc, |b| [$add(acc[0], b[0]), $add(acc[1], b[1])]);
                // SAFETY: `row` holds `2 $lanes` elements (asserted): two
                // stores of `$lanes`; the caller has the features `$store` needs.
                unsafe {
                    <$o as $crate::matmul::rounded::Rounded<$t>>::$store(v[0], row.as_mut_ptr());
                    <$o as $crate::matmul::rounded::Rounded<$t>>::$store(v[1], row.as_mut_ptr().add($lanes));
                }
            }
        }};
    }
    pub(in crate::matmul) use finish_in_registers;

    /// [`sums_512`]'s tile finished into its rows (the FMA and the
    /// dot-product kernels' epilogue).
    macro_rules! finish_512 {
        ($t:ty, $o:ty, $acc:expr, $into:expr) => {
            $crate::matmul::widening::x86::finish_in_registers!($t, $o, $acc, $into, 16, _mm512_loadu_ps, _mm512_add_ps, round_store_16)
        };
    }
    pub(in crate::matmul) use finish_512;
}
