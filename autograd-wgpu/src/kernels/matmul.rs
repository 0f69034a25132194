//! Batched f32 matrix products through any strides: 64 x 64 output blocks
//! per workgroup, 4 x 4 per invocation in registers, k-slices of both
//! operands staged in workgroup memory; the batch on the grid's third
//! dimension (in launches of at most 65,535).
//!
//! f16 and bf16 operands are read as they are: the kernel loads each
//! element from its 16-bit half of a word and widens it exactly (the cast
//! kernel's conversions), sums in f32, and the f32 product is rounded once
//! by the cast kernel. The bits of widening both operands first and
//! running the f32 product (`low::through_f32`), without the two widening
//! launches and the two f32 temporaries per product. A half product
//! asked for in f32 (`matmul_cast`, a weight gradient under autocast)
//! keeps its f32 sums as the output and rounds each to the half's
//! precision in place: one launch after the product, no half temporary.
//!
//! On lavapipe this block runs 0.6-0.7 GFLOP/s at 256-512, against 0.17 for
//! 16 x 16 tiles of one output per invocation and 0.27 for one output per
//! invocation without workgroup memory (the llvmpipe JIT is the limit
//! there; no GPU was at hand to measure).

use super::{ENTRY, GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{DType, Error, Layout, Result, validate};

/// Output rows and columns per workgroup.
const BLOCK: usize = 64;

/// Products with fewer outputs than this (a quarter of a block) run one
/// invocation per output instead.
const SMALL_OUTPUTS: usize = 1024;

/// What both kernels share: the bindings, where batch item `bi` of each
/// operand starts, and the added term. `lay`: m, n, k, r (batch rank), z0
/// (first batch item of the launch), batch dims (r), then per operand (a,
/// b, then the added term c): offset, row stride, column stride, batch
/// strides (r); then whether c is added (`addmm`; without it `xc` is bound
/// to `lay`'s buffer and never read).
///
/// The operands `xa`, `xb`, `xc` and their loads `lda`, `ldb`, `ldc` (an
/// element index to its f32 value) are declared per dtype by [`source`].
macro_rules! prelude {
    () => {
        r#"
fn batch_offsets(bi: u32) -> vec3<u32> {
    let r = lay[3];
    let abase = 5u + r;
    let bbase = abase + 3u + r;
    let cbase = bbase + 3u + r;
    var aoff = lay[abase];
    var boff = lay[bbase];
    var coff = lay[cbase];
    var rem = bi;
    for (var d = r; d > 0u; d = d - 1u) {
        let nd = lay[4u + d];
        let idx = rem % nd;
        rem = rem / nd;
        aoff = aoff + idx * lay[abase + 2u + d];
        boff = boff + idx * lay[bbase + 2u + d];
        coff = coff + idx * lay[cbase + 2u + d];
    }
    return vec3<u32>(aoff, boff, coff);
}

// the product's element plus c's (in that order of operands: the composite's `c + y`, bit for bit)
fn finish(v: f32, coff: u32, row: u32, col: u32) -> f32 {
    let cbase = 11u + 3u * lay[3];
    if (lay[cbase + 3u + lay[3]] == 0u) { return v; }
    return ldc(coff + row * lay[cbase + 1u] + col * lay[cbase + 2u]) + v;
}
"#
    };
}

/// 64 x 64 output blocks per workgroup of 16 x 16 invocations, each
/// invocation accumulating a 4 x 4 block in registers: a k-slice of 16 of
/// both operands staged in workgroup memory once per slice, then 16
/// multiply-adds per pair of staged vectors read (4x the arithmetic per
/// load of one output per invocation).
const BLOCKED: &str = concat!(
    prelude!(),
    r#"

var<workgroup> ta: array<array<f32, 64>, 16>;
var<workgroup> tb: array<array<f32, 64>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = lay[0]; let n = lay[1]; let k = lay[2]; let r = lay[3];
    let bi = lay[4] + wg.z;
    let abase = 5u + r;
    let bbase = abase + 3u + r;
    let offs = batch_offsets(bi);
    let aoff = offs.x;
    let boff = offs.y;
    let ars = lay[abase + 1u]; let acs = lay[abase + 2u];
    let brs = lay[bbase + 1u]; let bcs = lay[bbase + 2u];
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let me = lid.y * 16u + lid.x;
    var acc0 = vec4<f32>(0.0); var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0); var acc3 = vec4<f32>(0.0);
    for (var t = 0u; t < k; t = t + 16u) {
        for (var q = 0u; q < 4u; q = q + 1u) {
            let e = me + q * 256u;
            // a: 64 rows x 16 columns of the slice, stored k-major
            let ar = e / 16u; let ac = e % 16u;
            var va = 0.0;
            if (row0 + ar < m && t + ac < k) { va = lda(aoff + (row0 + ar) * ars + (t + ac) * acs); }
            ta[ac][ar] = va;
            // b: 16 rows of the slice x 64 columns
            let br = e / 64u; let bc = e % 64u;
            var vb = 0.0;
            if (t + br < k && col0 + bc < n) { vb = ldb(boff + (t + br) * brs + (col0 + bc) * bcs); }
            tb[br][bc] = vb;
        }
        workgroupBarrier();
        for (var p = 0u; p < 16u; p = p + 1u) {
            let av = vec4<f32>(ta[p][lid.y * 4u], ta[p][lid.y * 4u + 1u], ta[p][lid.y * 4u + 2u], ta[p][lid.y * 4u + 3u]);
            let bv = vec4<f32>(tb[p][lid.x * 4u], tb[p][lid.x * 4u + 1u], tb[p][lid.x * 4u + 2u], tb[p][lid.x * 4u + 3u]);
            acc0 = acc0 + av.x * bv;
            acc1 = acc1 + av.y * bv;
            acc2 = acc2 + av.z * bv;
            acc3 = acc3 + av.w * bv;
        }
        workgroupBarrier();
    }
    let accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row0 + lid.y * 4u + i;
        if (row >= m) { break; }
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = col0 + lid.x * 4u + j;
            if (col < n) { out[(bi * m + row) * n + col] = finish(accs[i][j], offs.z, row, col); }
        }
    }
}
"#
);

/// One invocation per output element over the whole batch (outputs
/// flattened onto a two-dimensional grid): for products too small to fill a
/// 64 x 64 block, many of them batched.
const PER_OUTPUT: &str = concat!(
    prelude!(),
    r#"

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let m = lay[0]; let n = lay[1]; let k = lay[2]; let r = lay[3];
    let i = gid.x + gid.y * nw.x * 256u;
    // the output count, after the table
    if (i >= lay[arrayLength(&lay) - 1u]) { return; }
    let bi = i / (m * n);
    let row = (i / n) % m;
    let col = i % n;
    let abase = 5u + r;
    let bbase = abase + 3u + r;
    let offs = batch_offsets(bi);
    let aoff = offs.x;
    let boff = offs.y;
    var pa = aoff + row * lay[abase + 1u];
    var pb = boff + col * lay[bbase + 2u];
    let acs = lay[abase + 2u];
    let brs = lay[bbase + 1u];
    var acc = 0.0;
    for (var p = 0u; p < k; p = p + 1u) {
        acc = acc + lda(pa) * ldb(pb);
        pa = pa + acs;
        pb = pb + brs;
    }
    out[i] = finish(acc, offs.z, row, col);
}
"#
);

/// `kernel` ([`BLOCKED`] or [`PER_OUTPUT`]) for operands of `dtype` (f32,
/// f16 or bf16): the bindings (the output always f32) and the loads it
/// reads them through. Built once per kernel and dtype.
fn source(kernel: &'static str, dtype: DType) -> Result<&'static str> {
    use std::sync::OnceLock;
    static SOURCES: [[OnceLock<String>; 3]; 2] = [const { [const { OnceLock::new() }; 3] }; 2];
    let (which, at) = (
        usize::from(kernel != BLOCKED),
        match dtype {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            other => return Err(Error::msg(format!("matmul: no product kernel reads {other:?} operands"))),
        },
    );
    Ok(SOURCES[which][at].get_or_init(|| {
        let word = if dtype == DType::F32 { "f32" } else { "u32" };
        let mut decls = format!(
            "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
             @group(0) @binding(1) var<storage, read> xa: array<{word}>;\n\
             @group(0) @binding(2) var<storage, read> xb: array<{word}>;\n\
             @group(0) @binding(3) var<storage, read_write> out: array<f32>;\n\
             @group(0) @binding(4) var<storage, read> xc: array<{word}>;\n"
        );
        if dtype == DType::F32 {
            decls.push_str("fn lda(i: u32) -> f32 { return xa[i]; }\nfn ldb(i: u32) -> f32 { return xb[i]; }\nfn ldc(i: u32) -> f32 { return xc[i]; }\n");
        } else {
            decls.push_str(super::cast::CONVERSIONS);
            for (f, array) in [("lda", "xa"), ("ldb", "xb"), ("ldc", "xc")] {
                let load = super::cast::load(dtype, array, "i").unwrap_or_default();
                decls.push_str(&format!("fn {f}(i: u32) -> f32 {{ return {load}; }}\n"));
            }
        }
        decls + kernel
    }))
}

/// `[batch.., m, k] x [batch.., k, n]` for f32, f16 or bf16 operands (one
/// dtype) on the device, in their dtype.
pub(crate) fn matmul(gpu: &Gpu, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    product(gpu, "matmul", (a, la), (b, lb), None)
}

/// `c + a b` (`addmm`, `c` of the product's shape, usually a broadcast
/// bias) in one kernel: each output gets its element of `c` added as it
/// is written, the composite's sum bit for bit with one launch and no
/// intermediate product. All three of one dtype (f32, f16 or bf16).
pub(crate) fn addmm(
    gpu: &Gpu,
    c: &WgpuStorage,
    lc: &Layout,
    a: &WgpuStorage,
    la: &Layout,
    b: &WgpuStorage,
    lb: &Layout,
) -> Result<WgpuStorage> {
    let op = "addmm";
    validate::input(op, c.len(), lc)?;
    if c.dtype != a.dtype {
        return Err(Error::DTypeMismatch { op, lhs: c.dtype, rhs: a.dtype });
    }
    validate::addmm(lc, la, lb, a.dtype)?;
    product(gpu, op, (a, la), (b, lb), Some((c, lc)))
}

/// The product, plus `c` where given.
fn product(
    gpu: &Gpu,
    op: &'static str,
    (a, la): (&WgpuStorage, &Layout),
    (b, lb): (&WgpuStorage, &Layout),
    c: Option<(&WgpuStorage, &Layout)>,
) -> Result<WgpuStorage> {
    validate::input(op, a.len(), la)?;
    validate::input(op, b.len(), lb)?;
    let dtype = a.dtype;
    if b.dtype != dtype {
        return Err(Error::DTypeMismatch { op, lhs: dtype, rhs: b.dtype });
    }
    let (nb, m, k, n) = validate::matmul(la, lb, dtype)?;
    let sums = product_f32(gpu, op, (a, la), (b, lb), c, (nb, m, k, n))?;
    if dtype == DType::F32 {
        return Ok(sums);
    }
    // one rounding of each f32 result, as the CPU's products round
    super::cast::cast(gpu, &sums, &Layout::contiguous(autograd_core::Shape::new(vec![sums.len()])), dtype)
}

/// `[batch.., m, k] x [batch.., k, n]` of f16 or bf16 operands (one
/// dtype), each output rounded to that dtype and returned widened to f32
/// (`Backend::matmul_cast` to f32): the product's f32 sums rounded in
/// place to the half's precision, the bits of rounding into a half buffer
/// and widening it, in one launch and without the half buffer.
pub(crate) fn matmul_widened(gpu: &Gpu, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    let op = "matmul_cast";
    validate::input(op, a.len(), la)?;
    validate::input(op, b.len(), lb)?;
    let dtype = a.dtype;
    if b.dtype != dtype {
        return Err(Error::DTypeMismatch { op, lhs: dtype, rhs: b.dtype });
    }
    let (narrow, widen) = match dtype {
        DType::BF16 => ("f32_to_bf16", "bf16_to_f32"),
        DType::F16 => ("f32_to_f16", "f16_to_f32"),
        other => return Err(Error::msg(format!("{op}: rounds a product of f16 or bf16 operands, not {other:?}"))),
    };
    let (nb, m, k, n) = validate::matmul(la, lb, dtype)?;
    let sums = product_f32(gpu, op, (a, la), (b, lb), None, (nb, m, k, n))?;
    let Ok(count @ 1..) = u32::try_from(sums.len()) else {
        // empty (a longer one failed the product's 32-bit index check)
        return Ok(sums);
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read_write> ys: array<f32>;\n\
         {}\n{ENTRY}\
             ys[i] = {widen}({narrow}(ys[i]));\n\
         }}\n",
        super::cast::CONVERSIONS
    );
    let lay = constants(gpu, bytemuck::cast_slice(&[count]));
    launch(gpu, op, &source, &[&lay, buf(&sums, op)?], grid(gpu, op, count.div_ceil(GROUP))?)?;
    Ok(sums)
}

/// The product's f32 sums (plus `c`), for operands of any served dtype.
fn product_f32(
    gpu: &Gpu,
    op: &'static str,
    (a, la): (&WgpuStorage, &Layout),
    (b, lb): (&WgpuStorage, &Layout),
    c: Option<(&WgpuStorage, &Layout)>,
    (nb, m, k, n): (usize, usize, usize, usize),
) -> Result<WgpuStorage> {
    let out = WgpuStorage::uninit(gpu, op, DType::F32, nb * m * n)?;
    if nb * m * n == 0 {
        return Ok(out);
    }
    if k == 0 {
        let zero = crate::kernels::elementwise::fill(gpu, &out, 0.0)?;
        return match c {
            // an empty sum: c itself, as the composite's c + 0
            Some((c, lc)) => {
                let dense = Layout::contiguous(lc.shape().clone());
                let add = |c: &WgpuStorage, lc: &Layout| {
                    crate::kernels::elementwise::binary(gpu, autograd_core::BinaryOp::Add, c, lc, &zero, &dense)
                };
                if c.dtype == DType::F32 { add(c, lc) } else { add(&super::cast::cast(gpu, c, lc, DType::F32)?, &dense) }
            }
            None => Ok(zero),
        };
    }
    let fits = |v: usize| {
        u32::try_from(v)
            .map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices ({:?} x {:?})", la.dims(), lb.dims())))
    };
    // the output's index (bi m + row) n + col and the operands' offsets are u32
    super::indexable(op, &[a, b, &out])?;
    if let Some((c, _)) = c {
        super::indexable(op, &[c])?;
    }
    let r = la.rank() - 2;
    let (xs, ys) = (buf(a, op)?, buf(b, op)?);
    // a dim of one element is never stepped: any stride will do
    let stride = |l: &Layout, d: usize| if l.dims()[d] == 1 { Ok(0) } else { fits(l.strides()[d]) };
    let table = |z0: usize| -> Result<Vec<u32>> {
        let mut meta = vec![fits(m)?, fits(n)?, fits(k)?, fits(r)?, fits(z0)?];
        for d in 0..r {
            meta.push(fits(la.dims()[d])?);
        }
        // without c, a's layout stands in (never read: the flag is 0)
        for l in [la, lb, c.map_or(la, |(_, lc)| lc)] {
            meta.extend([fits(l.offset())?, stride(l, r)?, stride(l, r + 1)?]);
            for d in 0..r {
                meta.push(stride(l, d)?);
            }
        }
        meta.push(u32::from(c.is_some()));
        Ok(meta)
    };
    if m * n < SMALL_OUTPUTS {
        let total = nb * m * n;
        let mut meta = table(0)?;
        meta.push(fits(total)?);
        let mbuf = constants(gpu, bytemuck::cast_slice(&meta));
        let zs = match c {
            Some((c, _)) => buf(c, op)?,
            None => &mbuf,
        };
        let groups = super::grid(gpu, op, (total as u32).div_ceil(super::GROUP))?;
        return super::launch(gpu, op, source(PER_OUTPUT, a.dtype)?, &[&mbuf, xs, ys, buf(&out, op)?, zs], groups).map(|_| out);
    }
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    let (gx, gy) = (n.div_ceil(BLOCK), m.div_ceil(BLOCK));
    if gx > max || gy > max {
        return Err(Error::msg(format!("{op}: {m} x {n} outputs need more than {max} blocks along a side on {}", gpu.info.name)));
    }
    let mut z0 = 0;
    while z0 < nb {
        let count = (nb - z0).min(max);
        let mbuf = constants(gpu, bytemuck::cast_slice(&table(z0)?));
        let zs = match c {
            Some((c, _)) => buf(c, op)?,
            None => &mbuf,
        };
        super::launch3(gpu, op, source(BLOCKED, a.dtype)?, &[&mbuf, xs, ys, buf(&out, op)?, zs], (gx as u32, gy as u32, count as u32))?;
        z0 += count;
    }
    Ok(out)
}
