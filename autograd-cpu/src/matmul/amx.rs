//! bf16 products on AMX tiles (Sapphire Rapids and later Xeons): the
//! `tdpbf16ps` instruction multiplies a 16 x 32 bf16 tile by a 32 x 16 one
//! and adds the products into a 16 x 16 f32 tile, 8192 multiply-adds per
//! instruction. PyTorch's CPU bf16 `mm` runs there through oneDNN; this is
//! the same instruction, written with stable `asm!` (the `_tile_*`
//! intrinsics are unstable in Rust). Chosen at run time: [`available`] is
//! true when [`crate::simd::active_isa`] is [`crate::simd::Isa::Amx`] (the
//! CPU has AMX-TILE and AMX-BF16, Linux granted the tile data state, and
//! `AUTOGRAD_CPU_ISA` does not cap below it).
//!
//! Numerics, as oneDNN's on the same tiles: products of bf16 pairs added
//! into f32 accumulators, the result rounded once to bf16 (after adding
//! `addmm`'s bias in f32), bf16 subnormal inputs read as zero and f32
//! subnormal sums flushed to zero (the instruction's fixed DAZ/FTZ).
//!
//! Layout of the work, for `C (m x n) = A (m x k) B (k x n)`, with `k`
//! cut into blocks of `TK` = 32 (one 64-byte tile row):
//! - `A` is packed once, in blocks of `MR` = 32 rows: per `k` block, the
//!   32 rows of 32 bf16 (two tiles, 2 KiB) one after the other, so each
//!   tile load reads 1 KiB of consecutive memory (a row-major copy with a
//!   row stride of `2k` bytes would map a tile's 16 rows onto two L1 sets).
//! - `B` is packed once too, in panels of `NR` = 32 columns, into the
//!   pair layout the instruction reads: per `k` block, two tiles of 16
//!   rows, row `q` holding `(b[2q][j], b[2q+1][j])` for 16 columns `j`.
//!   Both packings read the source in its memory order (along a row when
//!   `k` is the contiguous dim, two `k` rows at a time across the lines
//!   otherwise: `x W^T`, `g W` and `g^T x` each hit one of them).
//! - The micro-kernel keeps a 32 x 32 f32 block of `C` in four tiles,
//!   loading two tiles of `A` and two of `B` per block of 32 of `k` (eight
//!   tile registers in all). `k` is walked `KC` blocks at a time, a
//!   panel's 16 KiB of `B` staying in L1 while the row blocks of `A`
//!   stream past; the f32 sums wait in memory between the passes and are
//!   rounded once at the end (16 lanes at a time in AVX-512 registers).
//! - The row blocks are taken in groups whose packed `A` (about 1 MiB)
//!   stays in L2 while every panel of `B` passes over the group.
//! - What bounds the kernel here is the tile loads, not `tdpbf16ps`: on
//!   the Sapphire Rapids these were measured on, a `tileloadd` of 1 KiB
//!   from L1 takes about 17.5 ns (throughput) against 5.5 ns for a
//!   `tdpbf16ps` on registers, so the 2 x 2 block's one load per product
//!   instruction (the fewest eight tiles allow) runs near 930 GFLOP/s
//!   against 2.9 TFLOP/s on registers (benches/README.md).
//! - Rows past `m` and columns past `n` in the last blocks compute values
//!   that are never stored; the `k` tail is zero in both packed operands.
//!
//! No f32 copy of an operand or of the output is made: a product holds its
//! packed operands (bf16-sized) and its output (bf16, or f32 holding the
//! rounded values for `Backend::matmul_cast`).

use super::rounded::Rounded;
use super::shared::{SendPtr, View, batched};
use autograd_core::Layout;
use autograd_core::memory::{Buffer, scratch};
use half::bf16;
use rayon::prelude::*;

/// bf16 elements per tile row (64 bytes): one block of `k`.
const TK: usize = 32;
/// Rows of `C` per micro-kernel: two tiles of 16 rows.
const MR: usize = 32;
/// Columns of `C` per micro-kernel: two tiles of 16 columns.
const NR: usize = 32;
/// bf16 pairs (u32) in one packed block of one `k` block: 32 rows of `A`
/// or 32 columns of `B` by 32 of `k` (2 KiB, two tiles).
const BLOCK: usize = MR * TK / 2;
/// Pairs in one tile (1 KiB).
const TILE_PAIRS: usize = BLOCK / 2;

/// Whether bf16 products run on AMX tiles here ([`crate::simd::Isa::Amx`]
/// active).
///
/// ```
/// // false on CPUs without AMX, or under AUTOGRAD_CPU_ISA=avx512 and below
/// println!("AMX bf16 products: {}", autograd_cpu::matmul::amx::available());
/// ```
pub fn available() -> bool {
    crate::simd::active_isa() == crate::simd::Isa::Amx
}

/// The AMX kernel itself, for tests and benchmarks: `a @ b` (+ `init`) for
/// bf16 slices and layouts (validated here, as the backend validates them),
/// or `Ok(None)` when [`available`] is false. Products otherwise go through
/// [`autograd_core::Backend::matmul`], which picks this kernel by itself.
///
/// ```
/// use autograd_core::{Layout, Shape};
/// use half::bf16;
/// let one = vec![bf16::ONE; 4];
/// let l = Layout::contiguous(Shape::from([2, 2]));
/// if let Some(c) = autograd_cpu::matmul::amx::matmul_on_tiles(&one, &l, &one, &l, None).unwrap() {
///     assert_eq!(c, vec![bf16::from_f32(2.0); 4]);
/// }
/// ```
pub fn matmul_on_tiles(
    a: &[bf16],
    la: &Layout,
    b: &[bf16],
    lb: &Layout,
    init: Option<(&[bf16], &Layout)>,
) -> autograd_core::Result<Option<Vec<bf16>>> {
    super::shared::validate_bf16_product(a, la, b, lb, init)?;
    Ok(available().then(|| {
        let mut out = super::shared::output(la, lb);
        matmul(a, la, b, lb, init, &mut out);
        out
    }))
}

/// `[batch.., m, k] x [batch.., k, n]` (+ `init`, of the output's shape,
/// stride 0 where broadcast) on AMX tiles. The caller checked [`available`]
/// and validated every layout against its slice (`validate::matmul`/
/// `addmm`), as for [`super::matmul`]: every element index below is a
/// checked slice index, and `out` is `nb * m * n` elements (rounded to
/// bf16, stored as `O`: see [`Rounded`]).
pub(crate) fn matmul<O: Rounded<bf16>>(a: &[bf16], la: &Layout, b: &[bf16], lb: &Layout, init: Option<(&[bf16], &Layout)>, out: &mut [O]) {
    // every element is written by `product`'s rounding
    batched(la, lb, init.map(|(_, lc)| lc), out, |dst, mkn, va, vb, vc, threads| {
        let c = init.map(|(c, _)| c).zip(vc);
        product(dst, mkn, a, va, b, vb, c, threads)
    })
}

/// `k` blocks per pass over a panel: 8 blocks (256 of `k`) of a 32-column
/// panel of packed `B` are 16 KiB, which stay in L1 while every row block
/// of `A` streams past them (2 KiB per `k` block from L2). Without the
/// split both operands of the micro-kernel come from L2 once `k` passes
/// about 384, and the tile loads wait on it.
const KC: usize = 8;

/// `A` is read in place (not packed) from this many bytes, when at least
/// [`IN_PLACE_MIN_PANELS`] panels read it. Measured on Sapphire Rapids at
/// 1 thread: a 1024 x 1024 bf16 product 4.5 -> 3.2-3.4 ms in place (the
/// 2 MiB copy gone); but the MLP step's products (`A` of 128 rows, 128
/// KiB) were 3-8% slower read in place, and char_gpt's (2048 rows by 128
/// or 512, 4 to 12 panels) no faster: the strided first reads of a
/// small or once-read `A` cost more than a sequential copy into L2. A
/// row stride that is a multiple of 4 KiB puts a tile's 16 rows into one
/// L1 set: 2048 x 2048 was 305 GFLOP/s packed, 254 in place.
const IN_PLACE_MIN_BYTES: usize = 1 << 20;
/// See [`IN_PLACE_MIN_BYTES`].
const IN_PLACE_MIN_PANELS: usize = 8;

/// Bytes of packed `A` a worker keeps in L2 while the panels of `B` pass
/// over it (half of Sapphire Rapids' 2 MiB L2 per core: the rest holds
/// the `B` panel streaming in and the output).
const A_GROUP_BYTES: usize = 1 << 20;

/// One `m x k` by `k x n` product into the row-major `dst`, on up to
/// `threads` workers.
#[allow(clippy::too_many_arguments)]
fn product<O: Rounded<bf16>>(
    dst: &mut [O],
    (m, k, n): (usize, usize, usize),
    a: &[bf16],
    va: View,
    b: &[bf16],
    vb: View,
    c: Option<(&[bf16], View)>,
    threads: usize,
) {
    let kbs = k.div_ceil(TK);
    let (row_blocks, panels) = (m.div_ceil(MR), n.div_ceil(NR));
    let per_block = kbs * BLOCK;
    // Both operands packed up front, counted as live memory while the
    // product runs. Every pair the kernel reads is written by the packing
    // (lines past m and n are read but never stored): no zeroing.
    // `A`'s tiles are loaded from `a` itself (row stride `2 va.rs` bytes)
    // where its rows are contiguous along `k` and `k` is whole tile rows
    // (a tile of `A` is then 16 rows of 64 consecutive bytes as they lie,
    // and packing would only copy them), when `A` is large and read by
    // many panels: measured, see IN_PLACE_MIN_BYTES. The row blocks past
    // the last whole one are packed (their missing rows must not be read).
    let large = m.saturating_mul(k).saturating_mul(2) >= IN_PLACE_MIN_BYTES && panels >= IN_PLACE_MIN_PANELS;
    let in_place = if va.cs == 1 && k % TK == 0 && large && !va.rs.is_multiple_of(2048) { m / MR } else { 0 };
    let packed_rows = m - in_place * MR;
    let mut ap = Buffer::from_vec(scratch(packed_rows.div_ceil(MR) * per_block, 0u32));
    let mut bp = Buffer::from_vec(scratch(panels * per_block, 0u32));
    if packed_rows > 0 {
        // row in_place * MR < m: its offset is inside the validated layout
        let off = va.off + in_place * MR * va.rs;
        pack(a, Lines { off, so: va.rs, sk: va.cs, lines: packed_rows, k }, Packing::Rows, &mut ap, threads > 1);
    }
    pack(b, Lines { off: vb.off, so: vb.cs, sk: vb.rs, lines: n, k }, Packing::Columns, &mut bp, threads > 1);
    let out = SendPtr(dst.as_mut_ptr());
    // Each worker takes a range of row blocks and a range of panels; the
    // ranges of different workers share no (row, column) of `dst`.
    // Row blocks are taken in groups whose packed `A` (`group` blocks by
    // all of `k`) stays in L2 while every panel of `B` passes over it: in
    // one pass over all of `A` per panel, a 1024 x 1024 `A` (2 MiB) would
    // come from L3 again for each of the 32 panels.
    let group = (A_GROUP_BYTES / (per_block * 4).max(1)).max(1);
    let run = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        let out = &out;
        // this worker's f32 sums for one panel: a 32 x 32 block per row block
        let mut sums = vec![Tile([0f32; MR * NR]); group.min(rows.len())];
        let tiles = Tiles::configure();
        for g0 in rows.clone().step_by(group) {
            let rows = g0..(g0 + group).min(rows.end);
            for panel in cols.clone() {
                let (j0, width) = (panel * NR, NR.min(n - panel * NR));
                let b_panel = &bp[panel * per_block..(panel + 1) * per_block];
                for kb0 in (0..kbs).step_by(KC) {
                    let chunk = KC.min(kbs - kb0);
                    let b_chunk = &b_panel[kb0 * BLOCK..(kb0 + chunk) * BLOCK];
                    for (ib, sum) in rows.clone().zip(sums.iter_mut()) {
                        let a_tiles = if ib < in_place {
                            ATiles::InPlace { src: a, first: va.off + ib * MR * va.rs + kb0 * TK, rs: va.rs }
                        } else {
                            let at = (ib - in_place) * per_block;
                            ATiles::Packed(&ap[at + kb0 * BLOCK..at + (kb0 + chunk) * BLOCK])
                        };
                        tiles.block(a_tiles, b_chunk, chunk, kb0 > 0, sum);
                    }
                }
                for (ib, sum) in rows.clone().zip(sums.iter_mut()) {
                    let (i0, height) = (ib * MR, MR.min(m - ib * MR));
                    if kbs == 0 {
                        sum.0.fill(0.0);
                    }
                    if let Some((c, vc)) = c {
                        for ii in 0..height {
                            let base = vc.off + (i0 + ii) * vc.rs;
                            for (jj, v) in sum.0[ii * NR..ii * NR + width].iter_mut().enumerate() {
                                *v += c[base + (j0 + jj) * vc.cs].to_f32();
                            }
                        }
                    }
                    for ii in 0..height {
                        // SAFETY: row i0 + ii < m, columns j0..j0 + width <= n
                        // of the row-major m x n `dst`: in bounds, and written
                        // by this worker only (its panels and row blocks).
                        let row = unsafe { std::slice::from_raw_parts_mut(out.0.add((i0 + ii) * n + j0), width) };
                        tiles.round(&sum.0[ii * NR..ii * NR + width], row);
                    }
                }
            }
        }
    };
    if threads <= 1 {
        run(0..row_blocks, 0..panels);
    } else if panels >= threads {
        let per = panels.div_ceil(threads);
        (0..threads).into_par_iter().for_each(|t| run(0..row_blocks, (t * per).min(panels)..((t + 1) * per).min(panels)));
    } else {
        let per = row_blocks.div_ceil(threads);
        (0..threads).into_par_iter().for_each(|t| run((t * per).min(row_blocks)..((t + 1) * per).min(row_blocks), 0..panels));
    }
}

/// Where the pair `q` (elements `2q`, `2q + 1` of a `k` block) of line `o`
/// (a row of `A`, a column of `B`; `o < 32`) lies in its packed block.
#[derive(Clone, Copy)]
enum Packing {
    /// `A`: tile `o / 16`, row `o % 16`, pair column `q`.
    Rows,
    /// `B`: tile `o / 16`, row `q`, column `o % 16` (the pair layout
    /// `tdpbf16ps` reads its second operand in).
    Columns,
}

impl Packing {
    #[inline(always)]
    fn at(self, o: usize, q: usize) -> usize {
        match self {
            Packing::Rows => o * (TK / 2) + q,
            Packing::Columns => (o / 16) * TILE_PAIRS + q * 16 + o % 16,
        }
    }
}

/// An operand read as `lines` lines of `k` elements: element `(o, p)` at
/// `off + o so + p sk` (for `A`, `o` a row and `so`, `sk` its row and
/// column strides; for `B`, `o` a column).
#[derive(Clone, Copy)]
struct Lines {
    off: usize,
    so: usize,
    sk: usize,
    lines: usize,
    k: usize,
}

/// Packs `src` whole into `dst`: per block of 32 lines, `kbs` blocks of
/// 512 pairs (two tiles), in `packing`'s layout; zero past `k`, lines past
/// `lines` left as they are (their results are never stored). Split over
/// the rayon pool by blocks of lines when `parallel`. The loops follow the
/// source's memory: along a line when its `k` elements are adjacent (a
/// pair is then two neighbours), across lines, two `k` rows at a time,
/// when the lines are adjacent.
fn pack(src: &[bf16], v: Lines, packing: Packing, dst: &mut [u32], parallel: bool) {
    let per_block = v.k.div_ceil(TK) * BLOCK;
    let blocks = |ob: usize, dst: &mut [u32]| pack_block(src, v, packing, ob, dst);
    // (k = 0 leaves nothing to pack: chunks of at least one element)
    if parallel {
        dst.par_chunks_mut(per_block.max(1)).enumerate().for_each(|(ob, d)| blocks(ob, d));
    } else {
        dst.chunks_mut(per_block.max(1)).enumerate().for_each(|(ob, d)| blocks(ob, d));
    }
}

crate::simd::multiversion! {
    /// Block `ob` (lines `32 ob ..`) of [`pack`]: compiled per instruction
    /// set, so that the pair building and the interleaves vectorise.
    ///
    /// Two layouts write their pairs across the packed rows (`A`'s rows
    /// from adjacent lines, `B`'s columns from lines contiguous along `k`):
    /// a pair per 64-byte line, 4 bytes at a time, was the larger part of
    /// a small product's packing. Whole `k` blocks of whole groups of
    /// lines are built in the source's order into a small block and
    /// copied over by the register transpose ([`Transpose`]); the edges
    /// keep the element loops.
    fn pack_block<>(src: &[bf16], v: Lines, packing: Packing, ob: usize, dst: &mut [u32]) where [] {
        use super::bf16::pair;
        use crate::transpose::Transpose;
        let get = |o: usize, p: usize| if p < v.k { src[v.off + o * v.so + p * v.sk] } else { bf16::ZERO };
        let lines = MR.min(v.lines - ob * MR);
        // pair q of k block kb, line o of this block
        let at = |kb: usize, q: usize, o: usize| kb * BLOCK + packing.at(o, q);
        // k blocks with all 32 elements inside k
        let full = v.k / TK;
        let mut block = [0u32; BLOCK];
        if v.so == 1 && v.sk != 1 {
            // adjacent lines: two k rows at a time, across the block's lines
            for kb in 0..v.k.div_ceil(TK) {
                if let (Packing::Rows, MR, true) = (packing, lines, kb < full) {
                    // pair q of the 32 rows as row q of `block`, then
                    // transposed into the 32 packed rows of 16 pairs
                    for (q, row) in block.chunks_exact_mut(MR).enumerate() {
                        let (r0, r1) = (v.off + ob * MR + (kb * TK + 2 * q) * v.sk, v.off + ob * MR + (kb * TK + 2 * q + 1) * v.sk);
                        for (d, (&x, &y)) in row.iter_mut().zip(src[r0..r0 + MR].iter().zip(&src[r1..r1 + MR])) {
                            *d = pair(x, y);
                        }
                    }
                    u32::transpose_into(&block, 0, MR, MR, TK / 2, &mut dst[kb * BLOCK..(kb + 1) * BLOCK]);
                    continue;
                }
                for q in 0..TK / 2 {
                    let (k0, k1) = (kb * TK + 2 * q, kb * TK + 2 * q + 1);
                    if k1 < v.k {
                        let (r0, r1) = (v.off + ob * MR + k0 * v.sk, v.off + ob * MR + k1 * v.sk);
                        let (x, y) = (&src[r0..r0 + lines], &src[r1..r1 + lines]);
                        if let (Packing::Columns, MR) = (packing, lines) {
                            // 16 consecutive pairs per tile row: a loop that vectorises
                            for h in 0..2 {
                                let row = &mut dst[kb * BLOCK + h * TILE_PAIRS + q * 16..][..16];
                                for (d, (&x, &y)) in row.iter_mut().zip(x[h * 16..].iter().zip(&y[h * 16..])) {
                                    *d = pair(x, y);
                                }
                            }
                        } else {
                            for (o, (&x, &y)) in x.iter().zip(y).enumerate() {
                                dst[at(kb, q, o)] = pair(x, y);
                            }
                        }
                    } else {
                        for o in 0..lines {
                            dst[at(kb, q, o)] = pair(get(ob * MR + o, k0), get(ob * MR + o, k1));
                        }
                    }
                }
            }
        } else {
            // along each line (pairs of neighbours when sk = 1)
            // `B`'s columns, contiguous along k: whole tiles (16 lines) of
            // whole k blocks through `block`, line o's 16 pairs as its row o
            let tiled = if let (Packing::Columns, 1) = (packing, v.sk) { lines / 16 * 16 } else { 0 };
            for h in 0..tiled / 16 {
                for kb in 0..full {
                    for (o, row) in block[..TILE_PAIRS].chunks_exact_mut(16).enumerate() {
                        let line = v.off + (ob * MR + h * 16 + o) * v.so + kb * TK;
                        for (d, p) in row.iter_mut().zip(src[line..line + TK].chunks_exact(2)) {
                            *d = pair(p[0], p[1]);
                        }
                    }
                    let tile = kb * BLOCK + h * TILE_PAIRS;
                    u32::transpose_into(&block[..TILE_PAIRS], 0, 16, 16, 16, &mut dst[tile..tile + TILE_PAIRS]);
                }
            }
            for o in 0..lines {
                let line = v.off + (ob * MR + o) * v.so;
                // the k blocks the tiles above packed for this line
                let done = if o < tiled { full } else { 0 };
                if v.sk == 1 {
                    for (kb, chunk) in src[line..line + full * TK].chunks_exact(TK).enumerate().skip(done) {
                        if let Packing::Rows = packing {
                            // the row's 16 pairs are consecutive: a copy
                            let row = &mut dst[at(kb, 0, o)..][..TK / 2];
                            for (d, p) in row.iter_mut().zip(chunk.chunks_exact(2)) {
                                *d = pair(p[0], p[1]);
                            }
                        } else {
                            for q in 0..TK / 2 {
                                dst[at(kb, q, o)] = pair(chunk[2 * q], chunk[2 * q + 1]);
                            }
                        }
                    }
                }
                let first = if v.sk == 1 { full } else { 0 };
                for kb in first..v.k.div_ceil(TK) {
                    for q in 0..TK / 2 {
                        dst[at(kb, q, o)] = pair(get(ob * MR + o, kb * TK + 2 * q), get(ob * MR + o, kb * TK + 2 * q + 1));
                    }
                }
            }
        }
    }
}

/// Where [`Tiles::block`] loads its 32 rows of `A` from.
#[derive(Clone, Copy)]
enum ATiles<'a> {
    /// `kbs` packed blocks ([`Packing::Rows`]).
    Packed(&'a [u32]),
    /// The operand itself: row `r`'s element `p` (of the block's `k`
    /// range) at `src[first + r rs + p]`.
    InPlace { src: &'a [bf16], first: usize, rs: usize },
}

/// A 32 x 32 f32 block of `C`, aligned for the tile loads and stores.
#[derive(Clone)]
#[repr(C, align(64))]
struct Tile([f32; MR * NR]);

/// The tile configuration `ldtilecfg` reads: palette 1, all eight tiles
/// of 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// This thread's tile registers, configured for [`Tiles::block`] while the
/// value lives and released (back to the init state, so the thread's
/// context switches stop saving 8 KiB of tile data) when it is dropped.
/// Not `Send`: the configuration belongs to the thread that loaded it.
struct Tiles(std::marker::PhantomData<*const ()>);

impl Tiles {
    fn configure() -> Tiles {
        // The hardware and the grant, not the active ISA: another thread
        // may cap it (`limit_isa`) while a product chosen before runs.
        assert!(crate::simd::amx_granted(), "AMX tiles used where they are not available");
        // every AMX CPU has AVX-512 F, which `round` runs on; checked so
        // that its SAFETY argument does not rest on that
        assert!(std::arch::is_x86_feature_detected!("avx512f"), "AMX without AVX-512 F");
        // SAFETY: the CPU has AMX-TILE and AMX-BF16 and Linux granted this
        // process the tile data state (asserted above); CONFIG is a valid
        // 64-byte palette-1 configuration.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
        }
        Tiles(std::marker::PhantomData)
    }

    /// `sum (+)= a @ b` over `kbs` blocks of 32 of `k` (`+=` when
    /// `accumulate`, else `=`): `a` gives `kbs` blocks of 32 rows of `A`,
    /// `b` holds as many packed blocks of 32 columns of `B`.
    fn block(&self, a: ATiles<'_>, b: &[u32], kbs: usize, accumulate: bool, sum: &mut Tile) {
        assert!(kbs >= 1 && b.len() >= kbs * BLOCK, "packed operands of the checked sizes");
        // A's first tile, the bytes between its rows, from one k block to
        // the next, and from its first tile (rows 0-15) to its second
        let (a_ptr, a_stride, a_step, a_second) = match a {
            ATiles::Packed(a) => {
                assert!(a.len() >= kbs * BLOCK, "packed operands of the checked sizes");
                (a.as_ptr().cast::<u8>(), 64, 4 * BLOCK, 4 * TILE_PAIRS)
            }
            ATiles::InPlace { src, first, rs } => {
                // the last element read: row 31's element 32 kbs - 1
                let last = rs.checked_mul(MR - 1).and_then(|o| o.checked_add(first)).and_then(|o| o.checked_add(kbs * TK - 1));
                assert!(last.is_some_and(|l| l < src.len()), "A's rows inside their slice");
                // (2 x 31 rs is below 2 len: 32 rs does not overflow)
                (src[first..].as_ptr().cast::<u8>(), 2 * rs, 2 * TK, 32 * rs)
            }
        };
        // SAFETY (both blocks): the tiles are configured (self). The four
        // loads or stores of `sum` read or write 16 rows of 64 bytes at
        // stride 128 from sum, sum + 64, sum + 2048, sum + 2112: inside
        // its 4 KiB. Each loop iteration loads two 1 KiB tiles at b, b +
        // 1024 (stride 64) and advances b by 2 KiB, kbs >= 1 times: inside
        // the asserted length. It loads A's two tiles at a and a +
        // a_second, 16 rows of 64 bytes at stride a_stride, and advances
        // by a_step: for packed A the same as b's, inside its asserted
        // length; in place, rows 0-31 of the block, bytes 64 kb .. 64 kb +
        // 64 of each for kb < kbs: elements first + r rs + 32 kb + e (r <
        // 32, e < 32), at most the asserted last index.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            if accumulate {
                std::arch::asm!(
                    "tileloadd tmm0, [{c} + {cs}*1]",
                    "tileloadd tmm1, [{c} + {cs}*1 + 64]",
                    "tileloadd tmm2, [{c} + {cs}*1 + 2048]",
                    "tileloadd tmm3, [{c} + {cs}*1 + 2112]",
                    c = in(reg) sum.0.as_ptr(),
                    cs = in(reg) 4 * NR,
                    options(nostack, readonly),
                );
            } else {
                std::arch::asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            }
            std::arch::asm!(
                "2:",
                "tileloadd tmm4, [{a} + {sa}*1]",
                "tileloadd tmm6, [{b} + {s}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a2} + {sa}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "add {a}, {step}",
                "add {a2}, {step}",
                "add {b}, 2048",
                "dec {n}",
                "jnz 2b",
                "tilestored [{c} + {cs}*1], tmm0",
                "tilestored [{c} + {cs}*1 + 64], tmm1",
                "tilestored [{c} + {cs}*1 + 2048], tmm2",
                "tilestored [{c} + {cs}*1 + 2112], tmm3",
                a = inout(reg) a_ptr => _,
                a2 = inout(reg) a_ptr.wrapping_add(a_second) => _,
                sa = in(reg) a_stride,
                step = in(reg) a_step,
                b = inout(reg) b.as_ptr() => _,
                n = inout(reg) kbs => _,
                c = in(reg) sum.0.as_mut_ptr(),
                s = in(reg) 64usize,
                cs = in(reg) 4 * NR,
                options(nostack),
            );
        }
    }
}

impl Tiles {
    /// `dst = src` rounded to bf16 (stored as `O`), one row of a finished
    /// block: 16 lanes at a time in AVX-512 registers, without the
    /// per-call instruction-set dispatch of a multiversioned rounding (a row is
    /// only 32 values, and a 1024 x 1024 product has 32768 of them).
    fn round<O: Rounded<bf16>>(&self, src: &[f32], dst: &mut [O]) {
        assert_eq!(src.len(), dst.len(), "rounding a row: slices of one length");
        // SAFETY: `configure` asserted AVX-512 F on this CPU.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            round_avx512(src, dst)
        }
        // (no tiles off x86-64: never reached there)
        #[cfg(not(target_arch = "x86_64"))]
        O::round_inline(src, dst);
    }
}

/// [`Tiles::round`]'s body, compiled for AVX-512 F.
///
/// # Safety
/// The CPU has AVX-512 F; `src` and `dst` have one length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn round_avx512<O: Rounded<bf16>>(src: &[f32], dst: &mut [O]) {
    let full = src.len() / 16 * 16;
    for (s, d) in src[..full].chunks_exact(16).zip(dst[..full].chunks_exact_mut(16)) {
        // SAFETY: AVX-512 F (the caller's); 16 readable f32 at `s`, 16
        // writable elements at `d` (exact chunks).
        unsafe { O::round_store_16(std::arch::x86_64::_mm512_loadu_ps(s.as_ptr()), d.as_mut_ptr()) }
    }
    O::round_inline(&src[full..], &mut dst[full..]);
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: tilerelease only returns the tile state to its init
        // configuration; the CPU has AMX-TILE (checked in `configure`).
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("tilerelease", options(nostack, nomem));
        }
    }
}
