//! The blocked driver of the f16 and bf16 products that run on vector
//! micro-kernels (the f32 FMAs of `widening.rs`, the AVX512_BF16 dot
//! products of `bf16.rs`, which implement [`MicroKernel`] and call
//! [`matmul`] here): packing, cache blocking, the split over
//! threads and the epilogue, written once; a [`MicroKernel`] says how an
//! operand is packed and how two packed micro-panels are multiplied.
//!
//! Layout of the work, for `C (m x n) = A (m x k) B (k x n)`, after BLIS
//! (Van Zee and van de Geijn):
//! - `B` is packed in blocks of at most [`B_BLOCK`] packed values (the
//!   columns `jc..jc + nc`), as panels of `NR` columns: packed step `s` of
//!   a panel holds the `NR` columns' values at `k` steps `s` (f32) or
//!   `2s, 2s + 1` (bf16 pairs), zero past `n` and `k`.
//! - For each block of `mc` rows of `A` (at most [`A_BLOCK`] packed values,
//!   so that it stays in L2 while every panel of `B` passes), `A` is
//!   packed as micro-panels of `MR` rows in the same way.
//! - `k` is walked `KC` at a time (a `KC x NR` micro-panel of `B`, 16
//!   KiB, stays in L1 while the micro-panels of `A` stream past); between
//!   the passes a tile's f32 sums wait in a per-worker buffer, since a
//!   low-precision `C` cannot hold them; in the last pass each tile's
//!   epilogue adds `addmm`'s bias in f32 and rounds each output once:
//!   inside the micro-kernel, from its registers ([`Rows`]), for a whole
//!   tile with no bias or one bias row for all rows (Linear's), else
//!   right after the kernel (the sums still in L1, [`finish_tile`]).
//! - Work is split over the rayon pool by blocks of rows of `A` (each
//!   worker packs its own) and, when there are fewer of those than
//!   workers, by groups of panels; the packing of `B` is split by panels.
//!   Where `A` is short and `B` large (a batch of 128 rows against a
//!   784 x 512 weight), each worker instead packs a group of `B`'s panels
//!   and runs it against every block of rows ([`split_by_panels`]): its
//!   share of `B` stays in its L2 instead of every worker streaming all
//!   of `B`.
//!
//! No f32 copy of a whole operand or of the output is made: a product
//! holds its packed blocks (bounded in size) and its output (low-precision,
//! or f32 holding the rounded values: `rounded.rs`).
//! Every index below is a checked slice index, or a kernel load inside a
//! length asserted before the kernel runs.

use super::rounded::Rounded;
use super::shared::{SendPtr, View, batched};
use crate::low_elementwise::Low;
use crate::transpose::Transpose;
use autograd_core::Layout;
use autograd_core::memory::{Buffer, scratch};
use rayon::prelude::*;

/// Packed values (4 bytes each) of a block of `A` rows (256 KiB): in L2
/// on every x86 core since Haswell (256 KiB to 2 MiB).
const A_BLOCK: usize = 1 << 16;
/// Packed values of a block of `B` columns (2 MiB); each of its panels
/// is read once per row block of `A`.
const B_BLOCK: usize = 1 << 19;
/// Packed values in a cache line: packed panels start on one, so that no
/// vector load of a micro-kernel straddles two.
const ALIGN: usize = 16;

/// A micro-kernel's tile: `MR x NR` sums, `k` walked `kc` at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) mr: usize,
    pub(crate) nr: usize,
    /// `k` per pass, a multiple of [`MicroKernel::STEP`].
    pub(crate) kc: usize,
}

/// The largest tile of any kernel: the epilogue's row array and bias run.
const MAX_MR: usize = 8;
const MAX_NR: usize = 32;
/// Packed steps a transposing pack takes from each line at a time: a
/// block of `MAX_NR x PACK_RUN` 4-byte values, 8 KiB.
const PACK_RUN: usize = 64;
/// Values in [`pack_through_block`]'s block.
const PACK_BLOCK: usize = MAX_NR * PACK_RUN;

/// A block for [`pack_through_block`], made once per worker and product
/// as counted scratch storage (every value is written before it is
/// read): on the stack in each call it was zeroed for every group packed
/// (8 KiB per group; a 128-deep bf16 operand's packed group is 2 KiB),
/// 0.9% of an autocast char_gpt step in `memset`.
pub(crate) fn pack_block<P: Copy + Default + Send + 'static>() -> Buffer<P> {
    Buffer::from_vec(scratch(PACK_BLOCK, P::default()))
}

/// The packing of a group whose lines are each contiguous along `k` (a
/// row-major `A`, a weight read transposed as `B`): `fill(o, s0, run)`
/// writes line `o`'s packed values for steps `s0..s0 + run.len()`, a run
/// at a time for every line into `block` ([`pack_block`]'s, in L1), which
/// is then transposed into `dst`'s contiguous rows of `w` (one per packed
/// step) by the crate's transposing copy. Writing each line straight
/// into `dst` touched a cache line per value (29% of an autocast MLP step
/// before). `lines <= w <= 32` and `block` of [`pack_block`]'s length
/// (else it panics); rows past `lines` are left as they are (the caller
/// zeroed them).
#[inline(always)]
pub(crate) fn pack_through_block<P: Transpose + Default>(
    lines: usize,
    w: usize,
    steps: usize,
    dst: &mut [P],
    block: &mut [P],
    mut fill: impl FnMut(usize, usize, &mut [P]),
) {
    assert!(lines <= w && w <= MAX_NR, "a group of at most {MAX_NR} lines");
    let block = &mut block[..PACK_BLOCK];
    for s0 in (0..steps).step_by(PACK_RUN) {
        let len = PACK_RUN.min(steps - s0);
        for o in 0..lines {
            fill(o, s0, &mut block[o * PACK_RUN..o * PACK_RUN + len]);
        }
        let rows = &mut dst[s0 * w..(s0 + len) * w];
        if lines == w {
            P::transpose_into(block, 0, PACK_RUN, len, lines, rows);
        } else {
            // the last group's rows, padded past `lines`
            for (t, row) in rows.chunks_exact_mut(w).enumerate() {
                for (o, d) in row[..lines].iter_mut().enumerate() {
                    *d = block[o * PACK_RUN + t];
                }
            }
        }
    }
}

/// An operand read as `lines` lines of `k` elements: element `(o, p)` at
/// `off + o so + p sk` (for `A`, `o` a row and `so`, `sk` its row and
/// column strides; for `B`, `o` a column).
#[derive(Clone, Copy)]
pub(crate) struct Lines {
    pub(crate) off: usize,
    pub(crate) so: usize,
    pub(crate) sk: usize,
    pub(crate) lines: usize,
    pub(crate) k: usize,
}

/// A micro-kernel for elements `T` and the packing it reads.
pub(crate) trait MicroKernel<T: Low>: Sync {
    /// One packed value (4 bytes): an f32, or a pair of bf16.
    type Packed: Copy + Default + Send + Sync + 'static;
    /// Elements of `k` in one packed value.
    const STEP: usize;
    /// The tile on this CPU.
    fn geometry(&self) -> Geometry;
    /// Group `q` (lines `q w ..`) of `v` into `dst` (`w` values per packed
    /// step, `k.div_ceil(STEP)` steps): `dst[s w + o]` holds line
    /// `q w + o` at step `s`, zero past `v.lines` and `v.k`. `block` is
    /// the caller's [`pack_block`], for [`pack_through_block`].
    fn pack(&self, src: &[T], v: Lines, w: usize, q: usize, dst: &mut [Self::Packed], block: &mut [Self::Packed]);
    /// `tile[r][j] (+)= sum_s a[s][r] . b[s][j]` over `steps` packed steps
    /// (`a`: `steps x MR`, `b`: `steps x NR`; `+=` when `accumulate`),
    /// `tile` the `MR x NR` f32 sums row by row. With `into` (a whole
    /// tile's last pass) the sums are not stored: plus its bias, they are
    /// rounded from the registers into its rows of `C` (stored as `O`),
    /// as [`finish_tile`] would round them.
    fn kernel<O: Rounded<T>>(
        &self,
        a: &[Self::Packed],
        b: &[Self::Packed],
        steps: usize,
        accumulate: bool,
        tile: &mut [f32],
        into: Option<Rows<'_, '_, O>>,
    );
    /// [`kernel`](Self::kernel) without `into` for a tile of which only
    /// the first `height` (< MR) rows lie inside `C` (a block's last
    /// rows): those rows of `tile` as `kernel` leaves them, the others
    /// unspecified. The default computes the whole tile; a kernel with
    /// narrower variants skips the rows of padding (at m = 128 the AVX2
    /// tile's last 6-row panel holds 2 rows: a third of its work).
    fn kernel_rows(&self, a: &[Self::Packed], b: &[Self::Packed], steps: usize, accumulate: bool, tile: &mut [f32], height: usize) {
        let _ = height;
        self.kernel::<T>(a, b, steps, accumulate, tile, None);
    }
}

/// `$call` with the const `$r` bound to `$height` (1 to `$max`, at most
/// 8; a larger height takes `$max`): a kernel generic over the rows it
/// computes picked for a block's last tile ([`MicroKernel::kernel_rows`]).
macro_rules! with_rows {
    ($height:expr, $max:expr, $r:ident => $call:expr) => {
        $crate::matmul::blocked::with_rows!(@arms $height, $max, $r => $call; 1 2 3 4 5 6 7)
    };
    (@arms $height:expr, $max:expr, $r:ident => $call:expr; $($n:literal)*) => {
        match $height {
            // (an `R` above `$max` is never asked for; capped, it compiles)
            $($n => {
                const $r: usize = if $n < $max { $n } else { $max };
                $call
            })*
            _ => {
                const $r: usize = $max;
                $call
            }
        }
    };
}
pub(crate) use with_rows;

/// Where a micro-kernel writes a whole tile's results itself (the
/// epilogue without storing the sums and reading them back, 4.6% of an
/// autocast MLP step on AVX2): `bias`, one run of `NR` f32
/// added to every row (`addmm`'s bias when it is one row broadcast over
/// all of them, as Linear's), or none; `rows`, the tile's `MR` rows of
/// `C`, `NR` elements each (a kernel asserts both lengths).
pub(crate) struct Rows<'a, 'r, T> {
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) rows: &'a mut [&'r mut [T]],
}

/// `[batch.., m, k] x [batch.., k, n]` (+ `init`, of the output's shape,
/// stride 0 where broadcast) on `micro`. The caller validated every
/// layout against its slice (`validate::matmul`/`addmm`), as for
/// [`super::matmul`], and chose a kernel this CPU runs; `out` is the
/// output's `nb * m * n` elements, each rounded to `T` and stored as `O`.
pub(crate) fn matmul<T: Low, O: Rounded<T>, K: MicroKernel<T>>(
    micro: &K,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    init: Option<(&[T], &Layout)>,
    out: &mut [O],
) {
    // every element is written by each product's epilogue
    batched(la, lb, init.map(|(_, lc)| lc), out, |dst, mkn, va, vb, vc, threads| {
        let c = init.map(|(c, _)| c).zip(vc);
        product(micro, dst, mkn, (a, va), (b, vb), c, threads)
    })
}

/// Rows per block of `A`: at most [`A_BLOCK`] packed values of `steps`
/// packed steps each, a multiple of `MR`, and as many blocks as keep
/// `threads` workers equally busy.
fn row_block(g: Geometry, m: usize, steps: usize, threads: usize) -> usize {
    let most = (A_BLOCK / steps.max(1) / g.mr * g.mr).max(g.mr);
    let micro_rows = m.div_ceil(g.mr);
    let mut blocks = m.div_ceil(most);
    if threads > 1 && micro_rows >= threads {
        blocks = blocks.div_ceil(threads) * threads;
    }
    let blocks = blocks.min(micro_rows).max(1);
    micro_rows.div_ceil(blocks) * g.mr
}

/// Packed bytes of a block of `B` past which a split by rows has every
/// worker stream more of `B` than a quarter of the smallest L2 it has
/// (1 MiB on Zen 3 and 4, 2 MiB on Sapphire Rapids).
const PANEL_SPLIT_BYTES: usize = 256 << 10;

/// Whether `threads` workers split a product's panels of `B` rather than
/// its rows of `A`: where `A` has at most half as many rows (`m`) as the
/// block of `B` has columns (`cols`, of `step_bytes` packed bytes each)
/// and that block outgrows [`PANEL_SPLIT_BYTES`]. Split by rows, every
/// worker streams the whole block of `B` through its caches; split by
/// panels, each packs and reads its own share of `B` (kept in its L2) and
/// packs all of `A` again, which costs less where `A` is the smaller.
/// Measured on Zen 4 at 2 threads (benches/README): the MLP's `x W1^T`,
/// `h W2^T` and `g W2` at batch 128 9-13% faster on the FMA kernels and
/// 7-13% on `vdpbf16ps`, `x W1^T` at batch 32 34% and 22%; a weight
/// gradient `g^T x` (512 rows against 784 columns) measured 2-3% slower
/// split by panels, hence the factor of two.
fn split_by_panels(threads: usize, m: usize, cols: usize, step_bytes: usize) -> bool {
    threads > 1 && m.saturating_mul(2) <= cols && cols.saturating_mul(step_bytes) > PANEL_SPLIT_BYTES
}

/// The part of `buffer` (allocated [`ALIGN`] values longer than needed)
/// that starts on a cache line.
fn aligned<P>(buffer: &mut [P]) -> &mut [P] {
    let skip = buffer.as_ptr().align_offset(64).min(ALIGN);
    &mut buffer[skip..]
}

/// One `m x k` by `k x n` product into the row-major `dst`, on up to
/// `threads` workers.
fn product<T: Low, O: Rounded<T>, K: MicroKernel<T>>(
    micro: &K,
    dst: &mut [O],
    (m, k, n): (usize, usize, usize),
    (a, va): (&[T], View),
    (b, vb): (&[T], View),
    c: Option<(&[T], View)>,
    threads: usize,
) {
    let g = micro.geometry();
    // packed steps along k, and per pass: as few passes as keep each
    // within a quarter above the geometry's depth (its B micro-panel
    // still in L1), all of one depth (k = 784 at a kc of 256: three
    // passes of 262, not 256, 256, 256 and a pass of 16 whose kernel
    // calls and stored sums cost what a full pass's do)
    let steps = k.div_ceil(K::STEP);
    let most = g.kc / K::STEP;
    let kc = steps.div_ceil(steps.div_ceil(most + most / 4).max(1)).max(1);
    let nc = (B_BLOCK / steps.max(1) / g.nr * g.nr).max(g.nr);
    let by_panels = split_by_panels(threads, m, nc.min(n), steps.saturating_mul(std::mem::size_of::<K::Packed>()));
    let mc = row_block(g, m, steps, if by_panels { 1 } else { threads });
    let row_blocks = m.div_ceil(mc);
    // Packing buffers as counted storage: live memory while the product
    // runs, then kept by the storage cache (a training step asks for the
    // same sizes again: no fresh pages).
    let buffer = |len: usize| Buffer::from_vec(scratch(len + ALIGN, K::Packed::default()));
    let mut b_buffer = buffer(nc.min(n.div_ceil(g.nr) * g.nr) * steps);
    let bp = aligned(&mut b_buffer);
    let out = SendPtr(dst.as_mut_ptr());
    let tile = g.mr * g.nr;
    for jc in (0..n).step_by(nc) {
        let cols = nc.min(n - jc);
        let panels = cols.div_ceil(g.nr);
        let b_lines = Lines { off: vb.off + jc * vb.cs, so: vb.cs, sk: vb.rs, lines: cols, k };
        let packed_b = &mut bp[..panels * g.nr * steps];
        let panel_len = (g.nr * steps).max(1);
        let pack_b = |block: &mut Buffer<K::Packed>, (q, d): (usize, &mut [K::Packed])| micro.pack(b, b_lines, g.nr, q, d, block);
        // work items: a block of rows and a group of panels each, or
        // (split by panels) a group of panels with every block of rows
        let groups = match () {
            _ if by_panels => threads.min(panels),
            _ if row_blocks >= threads => 1,
            _ => threads.div_ceil(row_blocks).min(panels),
        };
        let per_group = panels.div_ceil(groups);
        if !by_panels {
            // packed once for all the items; split by panels, each item
            // packs its own group below
            if threads > 1 {
                packed_b.par_chunks_mut(panel_len).enumerate().for_each_init(pack_block, pack_b);
            } else {
                let mut block = pack_block();
                packed_b.chunks_mut(panel_len).enumerate().for_each(|item| pack_b(&mut block, item));
            }
        }
        // one worker's buffers: a packed block of A, the sums of its tiles
        // one pass over k: each tile is finished right after its kernel,
        // so one tile of sums serves them all
        let one_pass = steps <= kc;
        let tiles = if one_pass { 1 } else { mc / g.mr * per_group };
        let buffers = || (buffer(mc * steps), Buffer::from_vec(scratch(tiles * tile + ALIGN, 0f32)), pack_block());
        // row block `rb` against group `grp`, whose packed panels
        // `group_b` holds (the group's first panel first)
        let item = |(a_buffer, s_buffer, block): &mut (Buffer<K::Packed>, Buffer<f32>, Buffer<K::Packed>),
                    rb: usize,
                    grp: usize,
                    group_b: &[K::Packed]| {
            let out = &out;
            let (i0, rows) = (rb * mc, mc.min(m - rb * mc));
            let micro_rows = rows.div_ceil(g.mr);
            let ap = &mut aligned(a_buffer)[..micro_rows * g.mr * steps];
            let a_lines = Lines { off: va.off + i0 * va.rs, so: va.rs, sk: va.cs, lines: rows, k };
            for (q, d) in ap.chunks_mut((g.mr * steps).max(1)).enumerate() {
                micro.pack(a, a_lines, g.mr, q, d, block);
            }
            // this item's panels, and its f32 sums between the passes over
            // `k`: one MR x NR tile per (micro-row, panel), or one in all
            // for a single pass
            let first = (grp * per_group).min(panels);
            let mine = first..((grp + 1) * per_group).min(panels);
            let sums = &mut aligned(s_buffer)[..if one_pass { 1 } else { micro_rows * mine.len() } * tile];
            let tile_at = |panel: usize, ir: usize| if one_pass { 0 } else { (ir * mine.len() + panel - first) * tile };
            // the rows of `dst` a tile covers (`height` of them, `width`
            // long), written into the caller's `into`, and where it starts
            let dst_rows = |into: &mut [&mut [O]; MAX_MR], panel: usize, ir: usize| {
                let (j0, width) = (jc + panel * g.nr, g.nr.min(cols - panel * g.nr));
                let (r0, height) = (i0 + ir * g.mr, g.mr.min(rows - ir * g.mr));
                for (ii, row) in into.iter_mut().take(height).enumerate() {
                    // SAFETY: row r0 + ii < m and columns j0..j0 + width
                    // <= n of the row-major m x n `dst`: in bounds, and
                    // written by this item only (its rows and panels).
                    *row = unsafe { std::slice::from_raw_parts_mut(out.0.add((r0 + ii) * n + j0), width) };
                }
                (height, TileShape { nr: g.nr, r0, j0 })
            };
            // the epilogue after the sums are stored
            let finish = |sums: &mut [f32], panel: usize, ir: usize| {
                let mut rows: [&mut [O]; MAX_MR] = Default::default();
                let (height, shape) = dst_rows(&mut rows, panel, ir);
                finish_tile(sums, shape, c, &mut rows[..height]);
            };
            // a whole tile's rows, refilled in place for each kernel call:
            // the array of eight slices returned by value from `dst_rows`
            // (built, moved and moved again per call) put the driver at
            // 2.4-3.4% of the kernels' time in an autocast MLP step on AVX2,
            // 2.0-2.4% after; `into` slices of earlier tiles left in it are
            // never used again (each tile's rows are written once)
            let mut tile_rows: [&mut [O]; MAX_MR] = Default::default();
            if steps == 0 {
                // the empty sum (plus the bias); the epilogue adds into the tile
                for panel in mine.clone() {
                    for ir in 0..micro_rows {
                        let at = tile_at(panel, ir);
                        sums[at..at + tile].fill(0.0);
                        finish(&mut sums[at..at + tile], panel, ir);
                    }
                }
            }
            for s0 in (0..steps).step_by(kc) {
                let depth = kc.min(steps - s0);
                // the last pass finishes each tile while its sums are in L1
                let last = s0 + depth == steps;
                for panel in mine.clone() {
                    let b_panel = &group_b[(panel - first) * g.nr * steps + s0 * g.nr..][..depth * g.nr];
                    // a whole panel's last pass, with no bias or one row
                    // of it: its whole tiles are finished in the kernel
                    let mut wide = [0f32; MAX_NR];
                    let in_kernel = match c {
                        _ if !last || (panel + 1) * g.nr > cols => None,
                        None => Some(None),
                        Some((c, vc)) if vc.cs == 1 && vc.rs == 0 => {
                            let run = vc.off + jc + panel * g.nr;
                            T::widen(&c[run..run + g.nr], &mut wide[..g.nr]);
                            Some(Some(&wide[..g.nr]))
                        }
                        Some(_) => None,
                    };
                    for ir in 0..micro_rows {
                        let a_panel = &ap[ir * g.mr * steps + s0 * g.mr..][..depth * g.mr];
                        let at = tile_at(panel, ir);
                        match in_kernel {
                            // a whole tile: all its MR rows inside the block
                            Some(bias) if (ir + 1) * g.mr <= rows => {
                                dst_rows(&mut tile_rows, panel, ir);
                                let into = Rows { bias, rows: &mut tile_rows[..g.mr] };
                                micro.kernel(a_panel, b_panel, depth, s0 > 0, &mut sums[at..at + tile], Some(into));
                            }
                            _ => {
                                let sums = &mut sums[at..at + tile];
                                match rows - ir * g.mr {
                                    height if height < g.mr => micro.kernel_rows(a_panel, b_panel, depth, s0 > 0, sums, height),
                                    _ => micro.kernel::<O>(a_panel, b_panel, depth, s0 > 0, sums, None),
                                }
                                if last {
                                    finish(sums, panel, ir);
                                }
                            }
                        }
                    }
                }
            }
        };
        if by_panels {
            packed_b.par_chunks_mut(per_group * panel_len).enumerate().for_each_init(buffers, |bufs, (grp, group_b)| {
                for (q, d) in group_b.chunks_mut(panel_len).enumerate() {
                    pack_b(&mut bufs.2, (grp * per_group + q, d));
                }
                for rb in 0..row_blocks {
                    item(bufs, rb, grp, group_b);
                }
            });
            continue;
        }
        let packed_b = &*packed_b;
        let group_b = |grp: usize| &packed_b[(grp * per_group * panel_len).min(packed_b.len())..];
        let items = row_blocks * groups;
        if threads > 1 {
            (0..items).into_par_iter().for_each_init(buffers, |bufs, it| item(bufs, it / groups, it % groups, group_b(it % groups)));
        } else {
            let mut mine = buffers();
            (0..items).for_each(|it| item(&mut mine, it / groups, it % groups, group_b(it % groups)));
        }
    }
}

/// Where one tile of sums lands in `C`: at row `r0`, column `j0`, its
/// rows `nr` apart in the sums.
#[derive(Clone, Copy)]
struct TileShape {
    nr: usize,
    r0: usize,
    j0: usize,
}

crate::simd::multiversion! {
    /// A tile's sums plus `addmm`'s bias (in f32), rounded into the rows
    /// of `C` it covers (`dst[ii]`: row `r0 + ii` from column `j0`): one
    /// call per tile, the rounding vectorised.
    fn finish_tile<T, O>(sums: &mut [f32], t: TileShape, bias: Option<(&[T], View)>, dst: &mut [&mut [O]]) where [T: Low, O: Rounded<T>] {
        for (ii, row) in dst.iter_mut().enumerate() {
            let sums = &mut sums[ii * t.nr..ii * t.nr + row.len()];
            if let Some((c, vc)) = bias {
                let base = vc.off + (t.r0 + ii) * vc.rs;
                if vc.cs == 1 {
                    // a row of the bias (Linear's, broadcast over rows): widened as a run
                    let mut wide = [0f32; MAX_NR];
                    let wide = &mut wide[..sums.len()];
                    T::widen(&c[base + t.j0..base + t.j0 + sums.len()], wide);
                    for (v, b) in sums.iter_mut().zip(wide.iter()) {
                        *v += b;
                    }
                } else {
                    for (jj, v) in sums.iter_mut().enumerate() {
                        *v += c[base + (t.j0 + jj) * vc.cs].to_f32();
                    }
                }
            }
            O::round_inline(sums, row);
        }
    }
}
