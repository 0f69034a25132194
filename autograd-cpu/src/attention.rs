//! Fused attention (flash attention on the CPU, as PyTorch's
//! `_scaled_dot_product_flash_attention_cpu`): the scores are computed a
//! block of [`BLOCK_Q`] queries by [`BLOCK_K`] keys at a time and never
//! held whole.
//!
//! Forward, per batch item and query block: for each key block, the
//! scores `q k^T` (the query pre-scaled), the mask, then an online softmax:
//! each row keeps its running maximum `m` and sum `l`, and the output
//! accumulated so far is rescaled by `e^(m_old - m_new)` when the maximum
//! grows. At the end `out /= l` and `lse = m + ln l` is saved. Blocks above
//! a causal diagonal are skipped.
//!
//! Backward, per batch item: `D = rowsum(dO * out)`, then for each key
//! block and each query block the probabilities are recomputed from the
//! saved `lse` (`p = e^(s - lse)`), and `dV += p^T dO`, `dS = p (dO V^T - D)`,
//! `dQ += dS K`, `dK += dS^T Q`, all small products in cache
//! ([`crate::matmul::small`]). Batch items run in parallel (and, forward,
//! their query blocks too); each is single-threaded, its operands copied
//! once into row-major (and transposed) buffers.
//!
//! Dropout (`spec.dropout > 0`) multiplies each block's weights, after
//! the online softmax's sums, by their scales from the call's seed
//! ([`Dropout`]: a hash per weight, nothing stored); the backward
//! recomputes them for `dV` and the weights' gradient.
//!
//! Summation orders differ from the math path, so results agree to
//! rounding (the conformance check `attention` compares them with the
//! reference's composite).
//!
//! f16 and bf16 operands are read as they are ([`Source`]): each element
//! is widened to f32 as the item's copies are made, which the kernel makes
//! anyway, so a low-precision call holds no whole f32 copy of its inputs;
//! the arithmetic is the f32 kernel's on the widened values.

use crate::low_elementwise::Low;
use crate::matmul::small::{Rows, Strided, add_product};
use crate::simd::{lane_max, lane_sum, multiversion};
use autograd_core::Layout;
use autograd_core::attention::{AttentionSizes, AttentionSpec, Dropout};
use autograd_core::layout::for_each_index;
use autograd_core::memory::filled;
use autograd_core::scalar::FloatElem;
use rayon::prelude::*;

/// Queries per block: 64 rows of scores by [`BLOCK_K`] keys stay in L2
/// with the operands' blocks (PyTorch's CPU kernel uses 32-256).
pub(crate) const BLOCK_Q: usize = 64;
/// Keys per block.
pub(crate) const BLOCK_K: usize = 128;

/// Below this many multiply-adds a call stays on the calling thread.
const PAR_MIN_MACS: usize = 1 << 18;

/// The mask as a kernel reads it (a view of the caller's storage), its
/// elements `S` those of the operands.
#[derive(Clone, Copy)]
pub(crate) enum Mask<'a, S> {
    /// No mask (causal or not).
    None,
    /// `true` attends; `false` is `-inf`.
    Bool(&'a [bool]),
    /// Added to the scores, each element read as the kernel's `T`
    /// ([`Source`]: an f16/bf16 mask widened as it is read).
    Add(&'a [S]),
}

/// One operand of one batch item: where its matrix starts, and its row and
/// column strides.
#[derive(Clone, Copy)]
struct Mat {
    off: usize,
    rs: usize,
    cs: usize,
}

/// The element offset of each batch item's matrix in a layout with
/// `batch_dims` leading batch dims (stride 0 where broadcast).
fn items(l: &Layout, batch_dims: usize) -> Vec<Mat> {
    let r = l.rank();
    let (st, dims) = (l.strides(), &l.dims()[..batch_dims]);
    let mut out = Vec::with_capacity(dims.iter().product());
    for_each_index(dims, |idx| {
        out.push(Mat { off: l.offset() + idx.iter().zip(st).map(|(i, s)| i * s).sum::<usize>(), rs: st[r - 2], cs: st[r - 1] });
    });
    out
}

/// An element the kernel reads as a `T`: `T` itself, or an f16/bf16
/// value widened (exactly) to f32.
pub(crate) trait Source<T>: Copy + Send + Sync {
    fn get(self) -> T;
}

impl<T: FloatElem> Source<T> for T {
    #[inline(always)]
    fn get(self) -> T {
        self
    }
}

impl<L: Low> Source<f32> for L {
    #[inline(always)]
    fn get(self) -> f32 {
        self.to_f32()
    }
}

/// The `rows x cols` matrix `m` of `src` as a row-major buffer of `T`,
/// times `scale`.
fn gather<S: Source<T>, T: FloatElem>(src: &[S], m: Mat, rows: usize, cols: usize, scale: T) -> Vec<T> {
    if rows == 0 || cols == 0 {
        // an empty view's offset need not lie inside its storage: read nothing
        return Vec::new();
    }
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        let o = m.off + i * m.rs;
        if m.cs == 1 {
            out.extend(src[o..o + cols].iter().map(|&x| x.get() * scale));
        } else {
            out.extend((0..cols).map(|j| src[o + j * m.cs].get() * scale));
        }
    }
    out
}

/// The transpose of the row-major `rows x cols` buffer `x`.
fn transposed<T: FloatElem>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = vec![T::zero(); rows * cols];
    for (i, row) in x.chunks_exact(cols.max(1)).enumerate().take(rows) {
        for (j, &v) in row.iter().enumerate() {
            out[j * rows + i] = v;
        }
    }
    out
}

/// One batch item's operands, copied row-major: the scaled query `L x E`,
/// the keys `S x E` and `E x S`, the values `S x Ev` (and, for the
/// backward, `Ev x S`).
struct Item<T> {
    q: Vec<T>,
    k: Vec<T>,
    kt: Vec<T>,
    v: Vec<T>,
    vt: Vec<T>,
}

/// What every block of one call shares (elements `S`, read as the
/// kernel's `T`).
struct Call<'a, S> {
    z: AttentionSizes,
    causal: bool,
    mask: Mask<'a, S>,
    dropout: Option<Dropout>,
}

impl<S: Copy> Call<'_, S> {
    /// Copies batch item `b`'s operands.
    fn item<T: FloatElem>(&self, ops: &Operands<'_, S, T>, b: usize, with_vt: bool) -> Item<T>
    where
        S: Source<T>,
    {
        let z = &self.z;
        let q = gather(ops.q, ops.mq[b], z.l, z.e, ops.scale);
        let k = gather(ops.k, ops.mk[b], z.s, z.e, T::one());
        let kt = transposed(&k, z.s, z.e);
        let v = gather(ops.v, ops.mv[b], z.s, z.ev, T::one());
        let vt = if with_vt { transposed(&v, z.s, z.ev) } else { Vec::new() };
        Item { q, k, kt, v, vt }
    }

    /// The scores of queries `i0..i0 + ni` against keys `j0..j0 + nj` of
    /// item `b` into `s` (`ni x nj`, row-major), masked.
    fn scores<T: FloatElem>(&self, it: &Item<T>, mask_at: Option<Mat>, (i0, ni): (usize, usize), (j0, nj): (usize, usize), s: &mut [T])
    where
        S: Source<T>,
    {
        let z = &self.z;
        s.fill(T::zero());
        add_product(
            (ni, nj, z.e),
            &it.q,
            Strided { off: i0 * z.e, rs: z.e, cs: 1 },
            &it.kt,
            Rows { off: j0, ld: z.s },
            s,
            Rows { off: 0, ld: nj },
        );
        let ninf = T::neg_infinity();
        if self.causal && j0 + nj > i0 + 1 {
            for (r, row) in s.chunks_exact_mut(nj).enumerate() {
                // keys j0 + c > i0 + r are in the future of query i0 + r
                let first = (i0 + r + 1).saturating_sub(j0).min(nj);
                row[first..].fill(ninf);
            }
        }
        match (self.mask, mask_at) {
            // a mask row contiguous along the keys (`cs == 1`, the usual
            // `[L, S]` mask) is read as one slice: no index arithmetic or
            // bounds check per element, so the loop vectorises (the
            // strided loop was most of `scores`' own samples, 13-15% of a
            // masked bf16 SDPA's)
            (Mask::Bool(m), Some(at)) => {
                for (r, row) in s.chunks_exact_mut(nj).enumerate() {
                    let o = at.off + (i0 + r) * at.rs + j0 * at.cs;
                    if at.cs == 1 {
                        for (x, &keep) in row.iter_mut().zip(&m[o..o + nj]) {
                            *x = if keep { *x } else { ninf };
                        }
                        continue;
                    }
                    for (c, x) in row.iter_mut().enumerate() {
                        if !m[o + c * at.cs] {
                            *x = ninf;
                        }
                    }
                }
            }
            (Mask::Add(m), Some(at)) => {
                for (r, row) in s.chunks_exact_mut(nj).enumerate() {
                    let o = at.off + (i0 + r) * at.rs + j0 * at.cs;
                    if at.cs == 1 {
                        for (x, a) in row.iter_mut().zip(&m[o..o + nj]) {
                            *x = *x + a.get();
                        }
                        continue;
                    }
                    for (c, x) in row.iter_mut().enumerate() {
                        *x = *x + m[o + c * at.cs].get();
                    }
                }
            }
            _ => {}
        }
    }

    /// Multiplies the weights `x` of queries `i0..i0 + ni` and keys
    /// `j0..j0 + nj` of item `b` (`ni x nj`, row-major) by their dropout
    /// scales (0 or `1 / (1 - p)`), as the composite does.
    fn drop_weights<T: FloatElem>(&self, d: &Dropout, b: usize, (i0, ni): (usize, usize), (j0, nj): (usize, usize), x: &mut [T]) {
        let z = &self.z;
        for (r, row) in x.chunks_exact_mut(nj).enumerate().take(ni) {
            for (c, w) in row.iter_mut().enumerate() {
                *w = *w * T::from_f64(d.scale_at(Dropout::index(b, i0 + r, j0 + c, z.l, z.s)));
            }
        }
    }

    /// The key blocks query block `(i0, ni)` sees: all, or up to its last
    /// query's diagonal.
    fn keys_for(&self, i0: usize, ni: usize) -> usize {
        if self.causal { self.z.s.min(i0 + ni) } else { self.z.s }
    }
}

/// The forward's buffers, of elements `S` read as `T`.
pub(crate) struct Operands<'a, S, T> {
    q: &'a [S],
    k: &'a [S],
    v: &'a [S],
    mq: Vec<Mat>,
    mk: Vec<Mat>,
    mv: Vec<Mat>,
    mm: Option<Vec<Mat>>,
    scale: T,
}

impl<'a, S: Source<T>, T: FloatElem> Operands<'a, S, T> {
    /// `q`, `k`, `v` viewed through their layouts (already checked against
    /// their storages and against each other).
    pub(crate) fn new(
        (q, lq): (&'a [S], &Layout),
        (k, lk): (&'a [S], &Layout),
        (v, lv): (&'a [S], &Layout),
        mask: Option<&Layout>,
        z: &AttentionSizes,
        scale: f64,
    ) -> Self {
        let nb = z.batch_dims;
        Operands {
            q,
            k,
            v,
            mq: items(lq, nb),
            mk: items(lk, nb),
            mv: items(lv, nb),
            mm: mask.map(|l| items(l, nb)),
            scale: T::from_f64(scale),
        }
    }
}

/// `buf` cut into `n` consecutive pieces of `per` elements (the last one
/// shorter when `buf` is), empty pieces included: unlike `chunks_mut`, a
/// zero width still gives `n` pieces to zip with another buffer's.
fn pieces<T>(mut buf: &mut [T], n: usize, per: usize) -> Vec<&mut [T]> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let k = per.min(buf.len());
        let (head, tail) = std::mem::take(&mut buf).split_at_mut(k);
        out.push(head);
        buf = tail;
    }
    out
}

/// The forward: `(out [batch, L, Ev], lse [batch, L])`, contiguous.
pub(crate) fn forward<S: Source<T>, T: FloatElem>(
    ops: &Operands<'_, S, T>,
    z: AttentionSizes,
    spec: AttentionSpec,
    mask: Mask<'_, S>,
    dropout: Option<Dropout>,
) -> (Vec<T>, Vec<T>) {
    let call = Call { z, causal: spec.causal, mask, dropout };
    let mut out = filled(z.batch * z.l * z.ev, T::zero());
    let mut lse = filled(z.batch * z.l, T::infinity());
    if z.l == 0 || z.batch == 0 {
        return (out, lse);
    }
    let per_item = |(b, (out, lse)): (usize, (&mut [T], &mut [T])), parallel: bool| {
        let it = call.item(ops, b, false);
        let at = ops.mm.as_ref().map(|m| m[b]);
        let nq = z.l.div_ceil(BLOCK_Q);
        let blocks = pieces(out, nq, BLOCK_Q * z.ev).into_iter().zip(pieces(lse, nq, BLOCK_Q));
        let block = |(qb, (o, l)): (usize, (&mut [T], &mut [T]))| forward_block(&call, &it, (b, at), qb * BLOCK_Q, o, l);
        if parallel && nq > 1 {
            blocks.collect::<Vec<_>>().into_par_iter().enumerate().for_each(block);
        } else {
            blocks.enumerate().for_each(block);
        }
    };
    let macs = z.batch.saturating_mul(z.l).saturating_mul(z.s).saturating_mul(z.e + z.ev);
    let items = pieces(&mut out, z.batch, z.l * z.ev).into_iter().zip(pieces(&mut lse, z.batch, z.l)).enumerate();
    if macs < PAR_MIN_MACS {
        items.for_each(|x| per_item(x, false));
    } else {
        // query blocks in parallel too only when items alone leave threads idle
        let inner = z.batch < 2 * rayon::current_num_threads();
        items.collect::<Vec<_>>().into_par_iter().for_each(|x| per_item(x, inner));
    }
    (out, lse)
}

/// One query block of item `b` of the forward: `out` is its `ni x Ev`
/// rows, `lse` its `ni` entries.
fn forward_block<S: Source<T>, T: FloatElem>(
    call: &Call<'_, S>,
    it: &Item<T>,
    (b, at): (usize, Option<Mat>),
    i0: usize,
    out: &mut [T],
    lse: &mut [T],
) {
    let z = &call.z;
    let ni = lse.len();
    let mut m = vec![T::neg_infinity(); ni];
    let mut l = vec![T::zero(); ni];
    let mut s = vec![T::zero(); ni * BLOCK_K];
    let keys = call.keys_for(i0, ni);
    for j0 in (0..keys).step_by(BLOCK_K) {
        let nj = BLOCK_K.min(keys - j0);
        let s = &mut s[..ni * nj];
        call.scores(it, at, (i0, ni), (j0, nj), s);
        for r in 0..ni {
            let (mr, lr) = online_softmax_row(&mut s[r * nj..(r + 1) * nj], m[r], l[r]);
            let alpha = (m[r] - mr).vexp();
            if mr != m[r] && l[r] != T::zero() {
                scale_row(&mut out[r * z.ev..(r + 1) * z.ev], alpha);
            }
            (m[r], l[r]) = (mr, lr);
        }
        // dropped after the sums: lse is that of the weights before dropout
        if let Some(d) = &call.dropout {
            call.drop_weights(d, b, (i0, ni), (j0, nj), s);
        }
        add_product(
            (ni, z.ev, nj),
            s,
            Strided { off: 0, rs: nj, cs: 1 },
            &it.v,
            Rows { off: j0 * z.ev, ld: z.ev },
            out,
            Rows { off: 0, ld: z.ev },
        );
    }
    for r in 0..ni {
        let row = &mut out[r * z.ev..(r + 1) * z.ev];
        if l[r] == T::zero() {
            // no key attended (every score -inf, or none): zeros, lse = +inf
            row.fill(T::zero());
            lse[r] = T::infinity();
        } else {
            scale_row(row, T::one() / l[r]);
            lse[r] = m[r] + l[r].ln();
        }
    }
}

multiversion! {
    /// One row's scores become `e^(s - m_new)` in place; returns the new
    /// running maximum and sum (`l e^(m - m_new) + sum`). A row still all
    /// `-inf` becomes zeros and keeps `(-inf, 0)`; a NaN makes both NaN.
    fn online_softmax_row<T>(row: &mut [T], m: T, l: T) -> (T, T) where [T: FloatElem] {
        let mb = lane_max(row);
        let mn = if mb > m || mb.is_nan() { mb } else { m };
        if mn == T::neg_infinity() {
            row.fill(T::zero());
            return (mn, l);
        }
        for x in row.iter_mut() {
            *x = (*x - mn).vexp();
        }
        let alpha = (m - mn).vexp();
        (mn, l * alpha + lane_sum(row, |x| x))
    }
}

multiversion! {
    /// `row *= f`.
    fn scale_row<T>(row: &mut [T], f: T) where [T: FloatElem] {
        for x in row.iter_mut() {
            *x = *x * f;
        }
    }
}

/// The backward's extra buffers: the forward's `out`, `lse` and the
/// output's gradient, viewed through their layouts.
pub(crate) struct Grads<'a, S> {
    out: (&'a [S], Vec<Mat>),
    /// The buffer, each item's offset, the stride along L.
    lse: (&'a [S], Vec<usize>, usize),
    dout: (&'a [S], Vec<Mat>),
}

impl<'a, S: Copy> Grads<'a, S> {
    /// `out [.., L, Ev]`, `lse [.., L]` and `dout [.., L, Ev]` (checked).
    pub(crate) fn new(out: (&'a [S], &Layout), lse: (&'a [S], &Layout), dout: (&'a [S], &Layout), z: &AttentionSizes) -> Self {
        let nb = z.batch_dims;
        // lse as a matrix with one column
        let ll = lse.1.unsqueeze(lse.1.rank()).expect("a trailing dim of 1");
        let lm = items(&ll, nb);
        let stride = lse.1.strides().last().copied().unwrap_or(0);
        Grads {
            out: (out.0, items(out.1, nb)),
            lse: (lse.0, lm.iter().map(|m| m.off).collect(), stride),
            dout: (dout.0, items(dout.1, nb)),
        }
    }
}

/// Batch item `b`'s slices of `dq`, `dk` and `dv`.
type ItemGrads<'a, T> = (usize, ((&'a mut [T], &'a mut [T]), &'a mut [T]));

/// The backward: `dq [batch, L, E]`, `dk [batch, S, E]`, `dv [batch, S, Ev]`, contiguous.
pub(crate) fn backward<S: Source<T>, T: FloatElem>(
    ops: &Operands<'_, S, T>,
    g: &Grads<'_, S>,
    z: AttentionSizes,
    spec: AttentionSpec,
    mask: Mask<'_, S>,
    dropout: Option<Dropout>,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let call = Call { z, causal: spec.causal, mask, dropout };
    let mut dq = filled(z.batch * z.l * z.e, T::zero());
    let mut dk = filled(z.batch * z.s * z.e, T::zero());
    let mut dv = filled(z.batch * z.s * z.ev, T::zero());
    if z.l == 0 || z.s == 0 || z.batch == 0 {
        return (dq, dk, dv);
    }
    let scale = ops.scale;
    let per_item = |(b, ((dq, dk), dv)): ItemGrads<'_, T>| {
        let it = call.item(ops, b, true);
        let at = ops.mm.as_ref().map(|m| m[b]);
        let o = gather(g.out.0, g.out.1[b], z.l, z.ev, T::one());
        let d_o = gather(g.dout.0, g.dout.1[b], z.l, z.ev, T::one());
        let lse: Vec<T> = (0..z.l).map(|i| g.lse.0[g.lse.1[b] + i * g.lse.2].get()).collect();
        let d: Vec<T> = o.chunks_exact(z.ev.max(1)).zip(d_o.chunks_exact(z.ev.max(1))).map(|(o, g)| dot(o, g)).collect();
        let d: Vec<T> = if z.ev == 0 { vec![T::zero(); z.l] } else { d };
        let block = BLOCK_Q.min(z.l) * BLOCK_K.min(z.s);
        let (mut p, mut ds) = (vec![T::zero(); block], vec![T::zero(); block]);
        // the dropped weights `p m` (dropout's scales `m`), when dropping
        let mut pm = if call.dropout.is_some() { vec![T::zero(); block] } else { Vec::new() };
        for j0 in (0..z.s).step_by(BLOCK_K) {
            let nj = BLOCK_K.min(z.s - j0);
            // causal: queries before j0 see none of these keys
            let first = if call.causal { j0 / BLOCK_Q * BLOCK_Q } else { 0 };
            for i0 in (first..z.l).step_by(BLOCK_Q) {
                let ni = BLOCK_Q.min(z.l - i0);
                // causal: keys past this block's last query are all masked
                // (their p is 0): leave them out of every product
                let nj = if call.causal { nj.min(i0 + ni - j0) } else { nj };
                let (p, ds) = (&mut p[..ni * nj], &mut ds[..ni * nj]);
                call.scores(&it, at, (i0, ni), (j0, nj), p);
                for r in 0..ni {
                    exp_shifted(&mut p[r * nj..(r + 1) * nj], lse[i0 + r]);
                }
                // dV_j += P^T dO_i (with dropout, (P M)^T dO_i)
                let pv: &[T] = match &call.dropout {
                    Some(d) => {
                        let pm = &mut pm[..ni * nj];
                        pm.copy_from_slice(p);
                        call.drop_weights(d, b, (i0, ni), (j0, nj), pm);
                        pm
                    }
                    None => p,
                };
                add_product(
                    (nj, z.ev, ni),
                    pv,
                    Strided { off: 0, rs: 1, cs: nj },
                    &d_o,
                    Rows { off: i0 * z.ev, ld: z.ev },
                    dv,
                    Rows { off: j0 * z.ev, ld: z.ev },
                );
                // dP = dO_i V_j^T, then dS = P (dP - D)
                ds.fill(T::zero());
                add_product(
                    (ni, nj, z.ev),
                    &d_o,
                    Strided { off: i0 * z.ev, rs: z.ev, cs: 1 },
                    &it.vt,
                    Rows { off: j0, ld: z.s },
                    ds,
                    Rows { off: 0, ld: nj },
                );
                // with dropout the weights' gradient is M (dO_i V_j^T)
                if let Some(dr) = &call.dropout {
                    call.drop_weights(dr, b, (i0, ni), (j0, nj), ds);
                }
                for r in 0..ni {
                    softmax_grad_row(&mut ds[r * nj..(r + 1) * nj], &p[r * nj..(r + 1) * nj], d[i0 + r]);
                }
                // dQ_i += dS K_j (scaled at the end); dK_j += dS^T (scale Q_i)
                add_product(
                    (ni, z.e, nj),
                    ds,
                    Strided { off: 0, rs: nj, cs: 1 },
                    &it.k,
                    Rows { off: j0 * z.e, ld: z.e },
                    dq,
                    Rows { off: i0 * z.e, ld: z.e },
                );
                add_product(
                    (nj, z.e, ni),
                    ds,
                    Strided { off: 0, rs: 1, cs: nj },
                    &it.q,
                    Rows { off: i0 * z.e, ld: z.e },
                    dk,
                    Rows { off: j0 * z.e, ld: z.e },
                );
            }
        }
        scale_row(dq, scale);
    };
    let macs = z.batch.saturating_mul(z.l).saturating_mul(z.s).saturating_mul(2 * z.e + 2 * z.ev);
    let items = pieces(&mut dq, z.batch, z.l * z.e)
        .into_iter()
        .zip(pieces(&mut dk, z.batch, z.s * z.e))
        .zip(pieces(&mut dv, z.batch, z.s * z.ev))
        .enumerate();
    if macs < PAR_MIN_MACS {
        items.for_each(per_item);
    } else {
        items.collect::<Vec<_>>().into_par_iter().for_each(per_item);
    }
    (dq, dk, dv)
}

multiversion! {
    /// `sum a b` in the kernels' fixed lane order.
    fn dot<T>(a: &[T], b: &[T]) -> T where [T: FloatElem] {
        let mut acc = [T::zero(); crate::simd::LANES];
        let (ca, cb) = (a.chunks_exact(crate::simd::LANES), b.chunks_exact(crate::simd::LANES));
        let tail: T = ca.remainder().iter().zip(cb.remainder()).fold(T::zero(), |s, (&x, &y)| s + x * y);
        for (x, y) in ca.zip(cb) {
            for k in 0..crate::simd::LANES {
                acc[k] = acc[k] + x[k] * y[k];
            }
        }
        acc.iter().fold(T::zero(), |s, &x| s + x) + tail
    }
}

multiversion! {
    /// `row = e^(row - lse)`: the probabilities (0 where the score is
    /// `-inf`, and in a row with `lse = +inf`).
    fn exp_shifted<T>(row: &mut [T], lse: T) where [T: FloatElem] {
        for x in row.iter_mut() {
            *x = (*x - lse).vexp();
        }
    }
}

multiversion! {
    /// `ds = p (dp - d)` in place over `dp`.
    fn softmax_grad_row<T>(dp: &mut [T], p: &[T], d: T) where [T: FloatElem] {
        for (x, &p) in dp.iter_mut().zip(p) {
            *x = p * (*x - d);
        }
    }
}
