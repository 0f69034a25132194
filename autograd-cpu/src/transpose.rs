//! Transposing copies: a matrix stored column by column copied into
//! row-major order, in 8 x 8 (f32) or 4 x 4 (f64) register blocks with AVX
//! where the CPU has it (chosen at run time), scalar tiles elsewhere.
//!
//! The GEMM computes a small-batch `x W^T` transposed (`matmul.rs`,
//! `orientation`) and copies the result back with it: a tiled scalar loop
//! moves about 0.6 element per nanosecond here (13 us of a 115 us product at
//! batch 16), the register transpose several. Copying a transposed operand
//! to row-major before a large product was tried with it and did not pay:
//! the gemm crate's own packing is within 5-12% of a row-major operand
//! (benches/README.md).

/// Element types with a transposing copy.
pub(crate) trait Transpose: Copy + Default + Send + Sync + 'static {
    /// `dst[i * cols + j] = src[off + i + j * cs]` for `i < rows`, `j < cols`
    /// (`dst.len() == rows * cols`); `off + (rows - 1) + (cols - 1) * cs`
    /// must be inside `src`, or the call panics before reading anything.
    fn transpose_into(src: &[Self], off: usize, cs: usize, rows: usize, cols: usize, dst: &mut [Self]);
}

/// Checks the bounds every copy relies on; `false` for an empty matrix.
fn check<T>(src: &[T], off: usize, cs: usize, rows: usize, cols: usize, dst: &[T]) -> bool {
    assert_eq!(dst.len(), rows * cols, "transpose: destination of the wrong length");
    if rows == 0 || cols == 0 {
        return false;
    }
    let last = (cols - 1).checked_mul(cs).and_then(|x| x.checked_add(off + rows - 1));
    assert!(last.is_some_and(|l| l < src.len()), "transpose: source view outside its buffer");
    true
}

/// The portable path (and the edges of the register path): tiles of
/// 16 x 8 so that the strided side touches few cache lines at a time.
fn scalar<T: Copy>(src: &[T], off: usize, cs: usize, (r0, r1): (usize, usize), (c0, c1): (usize, usize), cols: usize, dst: &mut [T]) {
    for i0 in (r0..r1).step_by(16) {
        for j0 in (c0..c1).step_by(8) {
            for i in i0..(i0 + 16).min(r1) {
                for j in j0..(j0 + 8).min(c1) {
                    dst[i * cols + j] = src[off + i + j * cs];
                }
            }
        }
    }
}

macro_rules! register_transpose {
    ($t:ty, $lanes:literal, $kernel:ident $(, narrow: $narrow:ident)?) => {
        impl Transpose for $t {
            fn transpose_into(src: &[$t], off: usize, cs: usize, rows: usize, cols: usize, dst: &mut [$t]) {
                if !check(src, off, cs, rows, cols, dst) {
                    return;
                }
                let (rb, cb) = (rows / $lanes * $lanes, cols / $lanes * $lanes);
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("avx") && rb > 0 && cb > 0 {
                    // SAFETY: AVX is present (checked above); `check` proved
                    // every source index below `src.len()`, and the blocks
                    // cover rows < rb <= rows and cols < cb <= cols, so every
                    // destination index is below rows * cols = dst.len().
                    unsafe { $kernel(src.as_ptr().add(off), cs, rb, cb, cols, dst.as_mut_ptr()) };
                    scalar(src, off, cs, (0, rows), (cb, cols), cols, dst);
                    scalar(src, off, cs, (rb, rows), (0, cb), cols, dst);
                    return;
                }
                $(
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("avx") && rb > 0 {
                    // fewer columns than a register's lanes (cb == 0)
                    // SAFETY: AVX is present; `check` proved every source
                    // index (i < rb, j < cols) below `src.len()`; the
                    // kernel's stores stay below rows * cols = dst.len()
                    // by its contract, given 0 < cols < lanes and rb <= rows.
                    unsafe { $narrow(src.as_ptr().add(off), cs, rb, rows, cols, dst.as_mut_ptr()) };
                    // after the kernel: its last block's spill into row rb
                    // is overwritten here
                    scalar(src, off, cs, (rb, rows), (0, cols), cols, dst);
                    return;
                }
                )?
                scalar(src, off, cs, (0, rows), (0, cols), cols, dst);
            }
        }
    };
}

register_transpose!(f32, 8, transpose_f32_avx, narrow: transpose_f32_narrow_avx);
register_transpose!(f64, 4, transpose_f64_avx);

/// 4-byte values other than f32 (the bf16 pairs of the dot-product GEMM's
/// packing) through the f32 copy: it moves bits (loads, shuffles, stores,
/// no arithmetic), so any pattern arrives unchanged.
impl Transpose for u32 {
    fn transpose_into(src: &[u32], off: usize, cs: usize, rows: usize, cols: usize, dst: &mut [u32]) {
        // SAFETY: u32 and f32 have one size and alignment and every bit
        // pattern is a valid value of both; the views cover the same
        // memory for the same lifetimes (`dst` still borrowed uniquely).
        let (src, dst) = unsafe {
            (
                std::slice::from_raw_parts(src.as_ptr().cast::<f32>(), src.len()),
                std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<f32>(), dst.len()),
            )
        };
        f32::transpose_into(src, off, cs, rows, cols, dst);
    }
}

/// 8 x 8 blocks of f32: rows `j` of the source (`src + j cs`, 8 contiguous
/// values from `i0`) become rows `i` of the destination.
///
/// # Safety
/// AVX available; `src + i + j * cs` readable for `i < rb`, `j < cb`;
/// `dst + i * ld + j` writable for `i < rb`, `j < cb`; `rb`, `cb` multiples of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_f32_avx(src: *const f32, cs: usize, rb: usize, cb: usize, ld: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    // 64 x 64 tiles keep both sides' lines in cache between blocks
    for ib in (0..rb).step_by(64) {
        for jb in (0..cb).step_by(64) {
            for j0 in (jb..(jb + 64).min(cb)).step_by(8) {
                for i0 in (ib..(ib + 64).min(rb)).step_by(8) {
                    // SAFETY: within the bounds of the function's contract.
                    unsafe {
                        // macros, not closures: intrinsics must be inlined
                        // into this function, which has the feature enabled
                        macro_rules! r {
                            ($j:expr) => {
                                _mm256_loadu_ps(src.add(i0 + (j0 + $j) * cs))
                            };
                        }
                        macro_rules! w {
                            ($i:expr, $v:expr) => {
                                _mm256_storeu_ps(dst.add((i0 + $i) * ld + j0), $v)
                            };
                        }
                        let t = transpose8([r!(0), r!(1), r!(2), r!(3), r!(4), r!(5), r!(6), r!(7)]);
                        for (i, v) in t.into_iter().enumerate() {
                            w!(i, v);
                        }
                    }
                }
            }
        }
    }
}

/// An 8 x 8 block of f32 transposed in registers: lane `j` of output `i`
/// is lane `i` of input `j` (unpack, shuffle, swap 128-bit halves).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
pub(crate) fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Fewer than 8 columns (the 6-row micro-panels of the AVX2 GEMMs'
/// packing): blocks of 8 rows, the missing source columns read as zeros,
/// each destination row stored as a whole register whose lanes past
/// `cols` land on the next row's start and are overwritten by its store
/// (rows are stored in order); a row whose register would pass the end of
/// `dst` goes through a stack copy. Against the scalar loop it replaces,
/// one load per source line of 8 and one store per row.
///
/// # Safety
/// AVX available; `0 < cols < 8`; `rb` a multiple of 8 and `rb <= rows`;
/// `src + i + j * cs` readable for `i < rb`, `j < cols`; `dst` writable
/// for `rows * cols` elements. Rows `rb..rows` must be written after
/// this call (the last block's spill reaches row `rb`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_f32_narrow_avx(src: *const f32, cs: usize, rb: usize, rows: usize, cols: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    debug_assert!(cols > 0 && cols < 8 && rb.is_multiple_of(8) && rb <= rows);
    let end = rows * cols;
    for i0 in (0..rb).step_by(8) {
        let mut r = [_mm256_setzero_ps(); 8];
        for (j, r) in r.iter_mut().enumerate().take(cols) {
            // SAFETY: i0 + 8 <= rb and j < cols: inside the source by the contract.
            *r = unsafe { _mm256_loadu_ps(src.add(i0 + j * cs)) };
        }
        for (ii, v) in transpose8(r).into_iter().enumerate() {
            let at = (i0 + ii) * cols;
            if at + 8 <= end {
                // SAFETY: the register's 8 lanes end at or before rows * cols.
                unsafe { _mm256_storeu_ps(dst.add(at), v) };
            } else {
                let mut lanes = [0f32; 8];
                // SAFETY: `lanes` holds 8 f32; `cols` of them go to row
                // i0 + ii < rows, which ends at (i0 + ii + 1) cols <= end.
                unsafe {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), v);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.add(at), cols);
                }
            }
        }
    }
}

/// 4 x 4 blocks of f64, as [`transpose_f32_avx`].
///
/// # Safety
/// As [`transpose_f32_avx`], with `rb`, `cb` multiples of 4.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_f64_avx(src: *const f64, cs: usize, rb: usize, cb: usize, ld: usize, dst: *mut f64) {
    use std::arch::x86_64::*;
    for ib in (0..rb).step_by(32) {
        for jb in (0..cb).step_by(32) {
            for j0 in (jb..(jb + 32).min(cb)).step_by(4) {
                for i0 in (ib..(ib + 32).min(rb)).step_by(4) {
                    // SAFETY: within the bounds of the function's contract.
                    unsafe {
                        macro_rules! r {
                            ($j:expr) => {
                                _mm256_loadu_pd(src.add(i0 + (j0 + $j) * cs))
                            };
                        }
                        macro_rules! w {
                            ($i:expr, $v:expr) => {
                                _mm256_storeu_pd(dst.add((i0 + $i) * ld + j0), $v)
                            };
                        }
                        let (r0, r1, r2, r3) = (r!(0), r!(1), r!(2), r!(3));
                        let t0 = _mm256_unpacklo_pd(r0, r1);
                        let t1 = _mm256_unpackhi_pd(r0, r1);
                        let t2 = _mm256_unpacklo_pd(r2, r3);
                        let t3 = _mm256_unpackhi_pd(r2, r3);
                        w!(0, _mm256_permute2f128_pd::<0x20>(t0, t2));
                        w!(1, _mm256_permute2f128_pd::<0x20>(t1, t3));
                        w!(2, _mm256_permute2f128_pd::<0x31>(t0, t2));
                        w!(3, _mm256_permute2f128_pd::<0x31>(t1, t3));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Transpose;

    /// Every path (register squares, narrow blocks, scalar edges) against
    /// the definition, on shapes around the register sizes, with an
    /// offset and a column stride past the rows.
    fn check_all<T: Transpose + PartialEq + std::fmt::Debug>(from: impl Fn(usize) -> T) {
        for rows in 0..35 {
            for cols in 0..20 {
                let (off, cs) = (3, rows + 5);
                let src: Vec<T> = (0..off + cols * cs).map(&from).collect();
                let mut dst = vec![T::default(); rows * cols];
                T::transpose_into(&src, off, cs, rows, cols, &mut dst);
                for i in 0..rows {
                    for j in 0..cols {
                        assert_eq!(dst[i * cols + j], src[off + i + j * cs], "rows {rows} cols {cols} at ({i}, {j})");
                    }
                }
            }
        }
    }

    #[test]
    fn every_shape_matches_the_definition() {
        check_all(|i| i as f32 + 1.0);
        check_all(|i| i as f64 + 1.0);
        // NaN patterns (signalling, with payloads) arrive bit for bit
        check_all(|i| 0x7f80_0001u32.wrapping_add(i as u32 * 0x0101_0101));
    }
}
