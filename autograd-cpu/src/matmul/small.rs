//! A register-blocked product for small matrices already in cache: the
//! blocks of fused attention (`64 x 128 x 32` and the like), where the
//! `gemm` crate's packing of both operands costs as much as the product.
//!
//! `C += A B` with `B` and `C` row-major (rows contiguous) and `A` read one
//! scalar at a time through any pair of strides, so `A^T` is free: every
//! product of attention's backward (`P^T dO`, `dS^T Q`) is a call without
//! a copy. Tiles of 6 rows by 2 registers of columns are summed over the
//! whole `k` in registers (each `A` element broadcast, each `B` row
//! segment loaded once per tile), then added into `C`. Compiled per
//! instruction set by `multiversion!`. Each product is a fused
//! multiply-add (`mul_add`, rounded once): one instruction where the CPU
//! has FMA (the AVX2 and AVX-512 copies), libm's exact `fma` in the
//! baseline copy, so every copy gives the same bits, and the AVX copies
//! issue half the instructions a multiply and an add would.

use crate::simd::multiversion;
use autograd_core::scalar::FloatElem;

/// Rows of `C` updated together: each element of a `B` row loaded once
/// feeds six multiply-adds.
const MR: usize = 6;

/// One operand read through strides: element `(i, p)` at `off + i rs + p cs`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strided {
    pub(crate) off: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

/// One operand with contiguous rows: element `(p, j)` at `off + p ld + j`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    pub(crate) off: usize,
    pub(crate) ld: usize,
}

multiversion! {
    /// `c[ci.off + i ci.ld + j] += sum_p a(i, p) b(p, j)` for `i < m`,
    /// `j < n`, `p < k`, the sum taken in order of `p`. `ci.ld >= n` (rows
    /// of `C` do not overlap). Panics (a bug, never a read out of bounds)
    /// if an index falls outside a slice.
    pub(crate) fn add_product<T>(
        mnk: (usize, usize, usize),
        a: &[T],
        ai: Strided,
        b: &[T],
        bi: Rows,
        c: &mut [T],
        ci: Rows,
    ) where [T: FloatElem] {
        let (m, n, k) = mnk;
        if m == 0 || n == 0 {
            return;
        }
        assert!(ci.ld >= n, "rows of C overlap");
        let c = &mut c[ci.off..];
        let mut i0 = 0;
        while i0 + MR <= m {
            // tiles of two registers per row: 16 f32 lanes with AVX-512, 8
            // below (16 would spill AVX2's 16 registers); each element's
            // sum is the same either way
            let mut j0 = 0;
            if crate::simd::active_isa() >= crate::simd::Isa::Avx512 {
                while j0 + 2 * W <= n {
                    tile::<T, W>(i0, j0, k, a, ai, b, bi, c, ci.ld);
                    j0 += 2 * W;
                }
            } else {
                while j0 + W <= n {
                    tile::<T, { W / 2 }>(i0, j0, k, a, ai, b, bi, c, ci.ld);
                    j0 += W;
                }
            }
            if j0 < n {
                // the last columns: MR rows of C updated per row of B
                let w = n - j0;
                let mut acc = [[T::zero(); 2 * W]; MR];
                for p in 0..k {
                    let at = |r: usize| a[ai.off + (i0 + r) * ai.rs + p * ai.cs];
                    let row = &b[bi.off + p * bi.ld + j0..][..w];
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let x = at(r);
                        for (o, &y) in acc[..w].iter_mut().zip(row) {
                            *o = x.mul_add(y, *o);
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    let out = &mut c[(i0 + r) * ci.ld + j0..][..w];
                    for (o, &s) in out.iter_mut().zip(&acc[..w]) {
                        *o = *o + s;
                    }
                }
            }
            i0 += MR;
        }
        while i0 < m {
            // one row: its sums in a scratch row, then added, as in a tile
            let r0 = &mut c[i0 * ci.ld..][..n];
            for j0 in (0..n).step_by(2 * W) {
                let w = (2 * W).min(n - j0);
                let mut acc = [T::zero(); 2 * W];
                for p in 0..k {
                    let a0 = a[ai.off + i0 * ai.rs + p * ai.cs];
                    let row = &b[bi.off + p * bi.ld + j0..][..w];
                    for (o, &x) in acc[..w].iter_mut().zip(row) {
                        *o = a0.mul_add(x, *o);
                    }
                }
                for (o, &s) in r0[j0..j0 + w].iter_mut().zip(&acc[..w]) {
                    *o = *o + s;
                }
            }
            i0 += 1;
        }
    }
}

/// Columns per half tile: one AVX-512 register of f32.
const W: usize = 16;

/// The `MR x 2W` tile of `C` at `(i0, j0)`: its sums over `p` kept in
/// `2 MR` accumulators of `W` lanes (registers: 12 of AVX2's 16, 12 of
/// AVX-512's 32), then added into `C` once.
///
/// The operands' extents are checked once here, so the loop over `p` reads
/// without a bounds check per element (the checks and the pointer reloads
/// they forced were a third of the loop's instructions).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<T: FloatElem, const W: usize>(i0: usize, j0: usize, k: usize, a: &[T], ai: Strided, b: &[T], bi: Rows, c: &mut [T], ld: usize) {
    if k == 0 {
        return;
    }
    // the largest offsets the loop reads: A(i0 + MR - 1, k - 1) and
    // B(k - 1, j0 + 2W - 1); every other one is smaller (all terms grow)
    // (checked: a wrapped sum could pass the test below)
    let a_last = (i0 + MR - 1).checked_mul(ai.rs).zip((k - 1).checked_mul(ai.cs)).and_then(|(x, y)| ai.off.checked_add(x)?.checked_add(y));
    let b_last = (k - 1).checked_mul(bi.ld).and_then(|x| bi.off.checked_add(x)?.checked_add(j0 + 2 * W - 1));
    assert!(
        a_last.is_some_and(|i| i < a.len()) && b_last.is_some_and(|i| i < b.len()),
        "small product: an operand is shorter than its extent"
    );
    let mut acc = [[[T::zero(); W]; 2]; MR];
    for p in 0..k {
        let (bo, ao) = (bi.off + p * bi.ld + j0, ai.off + i0 * ai.rs + p * ai.cs);
        // SAFETY: bo + 2W - 1 <= b_last < b.len() and ao + r rs <= a_last <
        // a.len() for r < MR (checked above; p < k, offsets only grow)
        let (b0, b1): (&[T; W], &[T; W]) = unsafe { (&*b.as_ptr().add(bo).cast(), &*b.as_ptr().add(bo + W).cast()) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above
            let x = unsafe { *a.get_unchecked(ao + r * ai.rs) };
            for j in 0..W {
                acc[0][j] = x.mul_add(b0[j], acc[0][j]);
                acc[1][j] = x.mul_add(b1[j], acc[1][j]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        let out = &mut c[(i0 + r) * ld + j0..][..2 * W];
        for j in 0..W {
            out[j] = out[j] + acc[0][j];
            out[W + j] = out[W + j] + acc[1][j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tile whose extent overflows `usize` (a row stride near
    /// `usize::MAX`) or runs past its operand is a panic (a bug in the
    /// caller), never a read out of bounds: the extents are checked
    /// arithmetic before the unchecked loop.
    #[test]
    fn extents_past_the_operands_panic() {
        let (a, b) = (vec![1.0f32; 64], vec![1.0f32; 64]);
        let run = |ai: Strided, bi: Rows, k: usize| {
            std::panic::catch_unwind(|| {
                let mut c = vec![0.0f32; 6 * 16];
                add_product((6, 16, k), &a, ai, &b, bi, &mut c, Rows { off: 0, ld: 16 });
            })
            .is_err()
        };
        assert!(run(Strided { off: 0, rs: usize::MAX / 4, cs: 1 }, Rows { off: 0, ld: 16 }, 2), "a row stride that overflows");
        assert!(run(Strided { off: 0, rs: 1, cs: usize::MAX - 3 }, Rows { off: 0, ld: 16 }, 2), "a column stride that overflows");
        assert!(run(Strided { off: 0, rs: 2, cs: 1 }, Rows { off: 0, ld: 16 }, 5), "B shorter than 5 rows of 16");
        assert!(run(Strided { off: 60, rs: 1, cs: 1 }, Rows { off: 0, ld: 16 }, 2), "A shorter than its offset plus extent");
        assert!(!run(Strided { off: 0, rs: 2, cs: 1 }, Rows { off: 0, ld: 16 }, 4), "in bounds");
    }

    /// Against the plain triple loop, on every shape class: whole tiles,
    /// row and column remainders, a transposed and a strided `A`, offsets.
    #[test]
    fn matches_the_triple_loop() {
        for &(m, n, k) in &[(4, 32, 3), (9, 70, 5), (1, 1, 1), (3, 31, 0), (0, 5, 2), (13, 64, 33)] {
            let a: Vec<f64> = (0..m * k + 7).map(|i| ((i * 37 % 11) as f64) - 5.0).collect();
            let b: Vec<f64> = (0..k * (n + 3) + 2).map(|i| ((i * 13 % 7) as f64) * 0.5).collect();
            for ai in [Strided { off: 7, rs: k, cs: 1 }, Strided { off: 0, rs: 1, cs: m.max(1) }] {
                let bi = Rows { off: 2, ld: n + 3 };
                let ci = Rows { off: 1, ld: n + 2 };
                let mut c = vec![1.0; 1 + m * (n + 2)];
                let mut want = c.clone();
                add_product((m, n, k), &a, ai, &b, bi, &mut c, ci);
                for i in 0..m {
                    for j in 0..n {
                        let s: f64 = (0..k).map(|p| a[ai.off + i * ai.rs + p * ai.cs] * b[bi.off + p * bi.ld + j]).sum();
                        want[ci.off + i * ci.ld + j] += s;
                    }
                }
                assert_eq!(c, want, "{m}x{n}x{k} {ai:?}");
            }
        }
    }
}
