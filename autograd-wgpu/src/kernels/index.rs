//! Selection and placement: `where`, `gather`, `assign` (a strided write
//! into a view), `cat` (one `assign` per part) and strided copies move the
//! bits of any dtype of whole 32-bit words (f32, f64, int64);
//! `scatter_add` sums f32.
//!
//! Indices are int64 on the device (little-endian word pairs). Before a
//! kernel reads them, the host checks every index against its dim (reading
//! the index buffer back, which waits for the work queued before it): an
//! index out of range is the call's `Err`, as on the CPU, never a read past
//! a buffer or a silently clamped value. `scatter_add` runs one invocation
//! per output element, which adds its sources in index order: the same sum
//! on every run (no float atomics, whose order would change the rounding).

use super::{ENTRY, GROUP, STRIDED, buf, constants, grid, launch, meta};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::dispatch::index_values;
use autograd_core::{DType, Error, Layout, Result, Shape, validate};

/// The condition of `where` as a truth value, from its dtype's bits.
fn truth(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        // -0.0 is false, NaN true (`x != 0`)
        DType::F32 => "(cs[k] & 0x7fffffffu) != 0u",
        DType::I64 => "(cs[2u * k] | cs[2u * k + 1u]) != 0u",
        DType::Bool => "((cs[k / 4u] >> (8u * (k % 4u))) & 0xffu) != 0u",
        _ => return None,
    })
}

/// Whether `where` on this condition dtype has a kernel.
pub(crate) fn where_on_device(cond: DType) -> bool {
    truth(cond).is_some()
}

/// 32-bit words per element of the dtypes whose elements the selection and
/// placement kernels move as bits (`None`: packed below a word, the host
/// path moves those).
pub(crate) fn words(dtype: DType) -> Option<u32> {
    match dtype.size_in_bytes() {
        4 => Some(1),
        8 => Some(2),
        _ => None,
    }
}

fn words_of(op: &str, dtype: DType) -> Result<u32> {
    words(dtype).ok_or_else(|| Error::msg(format!("{op}: no kernel moves {dtype:?} elements")))
}

/// Whether [`assign`] (and so [`cat`]) serves this dtype: whole words, or
/// f16, bf16 and bool elements packed in words.
pub(crate) fn assignable(dtype: DType) -> bool {
    words(dtype).is_some() || matches!(dtype.size_in_bytes(), 1 | 2)
}

/// `where(c, a, b)` for `a` and `b` of one dtype of whole words and a
/// condition of any dtype [`where_on_device`] accepts.
pub(crate) fn where_select(
    gpu: &Gpu,
    c: &WgpuStorage,
    lc: &Layout,
    a: &WgpuStorage,
    la: &Layout,
    b: &WgpuStorage,
    lb: &Layout,
) -> Result<WgpuStorage> {
    let name = "where";
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch { op: "where", lhs: a.dtype, rhs: b.dtype });
    }
    let w = words_of(name, a.dtype)?;
    validate::same_shape(name, lc, la)?;
    validate::same_shape(name, lc, lb)?;
    validate::input(name, c.len(), lc)?;
    validate::input(name, a.len(), la)?;
    validate::input(name, b.len(), lb)?;
    super::indexable(name, &[c, a, b])?;
    let cond = truth(c.dtype).ok_or_else(|| Error::msg(format!("{name}: no kernel for a {:?} condition", c.dtype)))?;
    let n = validate::output(name, la.shape(), a.dtype)?;
    let out = WgpuStorage::uninit(gpu, name, a.dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    let m = constants(gpu, bytemuck::cast_slice(&meta(name, &[lc, la, lb])?));
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> cs: array<u32>;\n\
         @group(0) @binding(2) var<storage, read> xa: array<u32>;\n\
         @group(0) @binding(3) var<storage, read> xb: array<u32>;\n\
         @group(0) @binding(4) var<storage, read_write> ys: array<u32>;\n\
         const W: u32 = {w}u;\n\
         {STRIDED}\n\
         {ENTRY}\
             let k = at(i, 0u);\n\
             let pick = {cond};\n\
             let ia = at(i, 1u);\n\
             let ib = at(i, 2u);\n\
             for (var w = 0u; w < W; w = w + 1u) {{ ys[i * W + w] = select(xb[ib * W + w], xa[ia * W + w], pick); }}\n\
         }}\n",
    );
    let bufs = [&m, buf(c, name)?, buf(a, name)?, buf(b, name)?, buf(&out, name)?];
    launch(gpu, name, &source, &bufs, grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(out)
}

/// Reads the indices back and checks each against `size` (an `Err` as the
/// CPU's for the first one out of range).
fn check_indices(op: &'static str, idx: &WgpuStorage, lidx: &Layout, dim: usize, size: usize) -> Result<()> {
    let values = index_values(&idx.read_storage()?, lidx, op)?;
    match values.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
        Some(&index) => Err(Error::IndexOutOfRange { op, index, dim, size, location: None }),
        None => Ok(()),
    }
}

/// `out[i] = s[i with its dim-th coordinate replaced by idx[i]]`, for `s`
/// of any [`assignable`] dtype (elements narrower than a word gathered a
/// word of output at a time).
pub(crate) fn gather(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, dim: usize, idx: &WgpuStorage, lidx: &Layout) -> Result<WgpuStorage> {
    let name = "gather";
    if !assignable(s.dtype) {
        return Err(Error::msg(format!("{name}: no kernel moves {:?} elements", s.dtype)));
    }
    validate::input(name, s.len(), layout)?;
    validate::input(name, idx.len(), lidx)?;
    validate::gather(layout, dim, lidx, s.dtype)?;
    let n = validate::output(name, lidx.shape(), s.dtype)?;
    let out = WgpuStorage::uninit(gpu, name, s.dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    // the output too: a broadcast index may be far smaller than it
    super::indexable(name, &[s, idx, &out])?;
    check_indices(name, idx, lidx, dim, layout.dims()[dim])?;
    // the source seen through the index's shape, its dim not stepped: the
    // kernel adds index x stride along it
    let mut strides = layout.strides().to_vec();
    let step = strides[dim];
    strides[dim] = 0;
    let through = Layout::new(lidx.shape().clone(), strides, layout.offset());
    let mut t = meta(name, &[lidx, &through])?;
    t.push(u32::try_from(step).map_err(|_| Error::msg(format!("{name}: a stride of {step} is past the GPU kernels' 32-bit indices")))?);
    let m = constants(gpu, bytemuck::cast_slice(&t));
    // checked on the host: 0 <= index < size, so an index's low word is the index
    let source_of = "let si = at(e, 1u) + ids[2u * at(e, 0u)] * lay[arrayLength(&lay) - 1u];";
    let (body, outputs) = match words(s.dtype) {
        Some(w) => (
            format!(
                "let e = i;\n {source_of}\n\
                 for (var w = 0u; w < {w}u; w = w + 1u) {{ ys[i * {w}u + w] = xs[si * {w}u + w]; }}\n"
            ),
            n,
        ),
        None => {
            // one invocation per output word: its elements' bits gathered
            let (per, bits) = (4 / s.dtype.size_in_bytes(), 8 * s.dtype.size_in_bytes());
            let mask = (1u32 << bits) - 1;
            (
                format!(
                    "var word = 0u;\n\
                     for (var t = 0u; t < {per}u; t = t + 1u) {{\n\
                         let e = i * {per}u + t;\n\
                         if (e >= n) {{ break; }}\n\
                         {source_of}\n\
                         word = word | (((xs[si / {per}u] >> ({bits}u * (si % {per}u))) & {mask}u) << ({bits}u * t));\n\
                     }}\n\
                     ys[i] = word;\n"
                ),
                n.div_ceil(per),
            )
        }
    };
    let count = u32::try_from(outputs).map_err(|_| Error::msg(format!("{name}: {n} elements are past the GPU kernels' 32-bit indices")))?;
    // `ENTRY` bounds the invocations by `lay[0]`: the output's words here, its elements in `n`
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<u32>;\n\
         @group(0) @binding(2) var<storage, read> ids: array<u32>;\n\
         @group(0) @binding(3) var<storage, read_write> ys: array<u32>;\n\
         @group(0) @binding(4) var<storage, read> counts: array<u32>;\n\
         {STRIDED}\n\
         @compute @workgroup_size({GROUP})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
             let i = gid.x + gid.y * nw.x * {GROUP}u;\n\
             let n = counts[1];\n\
             if (i >= counts[0]) {{ return; }}\n\
             {body}\
         }}\n"
    );
    let counts = constants(gpu, bytemuck::cast_slice(&[count, n as u32]));
    let bufs = [&m, buf(s, name)?, buf(idx, name)?, buf(&out, name)?, &counts];
    launch(gpu, name, &source, &bufs, grid(gpu, name, count.div_ceil(GROUP))?)?;
    Ok(out)
}

/// A zero tensor of `shape` with `src[i]` added at `i` with its dim-th
/// coordinate replaced by `idx[i]`, for f32 `src`.
pub(crate) fn scatter_add(
    gpu: &Gpu,
    shape: &Shape,
    dim: usize,
    idx: &WgpuStorage,
    lidx: &Layout,
    src: &WgpuStorage,
    lsrc: &Layout,
) -> Result<WgpuStorage> {
    let name = "scatter_add";
    validate::input(name, idx.len(), lidx)?;
    validate::input(name, src.len(), lsrc)?;
    validate::scatter_add(shape, dim, lidx, lsrc, DType::F32)?;
    super::indexable(name, &[idx, src])?;
    let n = validate::output(name, shape, DType::F32)?;
    let out = WgpuStorage::uninit(gpu, name, DType::F32, n)?;
    if n == 0 {
        return Ok(out);
    }
    if lidx.numel() == 0 {
        return super::elementwise::fill(gpu, &out, 0.0);
    }
    check_indices(name, idx, lidx, dim, shape.dims()[dim])?;
    let fits = |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{name}: {v} is past the GPU kernels' 32-bit indices")));
    // [outputs, rank, dim, out dims.., index dims.., index offset, index
    // strides.., source offset, source strides..]
    let mut t = vec![fits(n)?, fits(shape.rank())?, fits(dim)?];
    for &d in shape.dims().iter().chain(lidx.dims()) {
        t.push(fits(d)?);
    }
    for l in [lidx, lsrc] {
        t.push(fits(l.offset())?);
        for (&s, &d) in l.strides().iter().zip(l.dims()) {
            t.push(if d == 1 { 0 } else { fits(s)? });
        }
    }
    let m = constants(gpu, bytemuck::cast_slice(&t));
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> ids: array<u32>;\n\
         @group(0) @binding(2) var<storage, read> xs: array<f32>;\n\
         @group(0) @binding(3) var<storage, read_write> ys: array<f32>;\n\
         {ENTRY}\
             let r = lay[1];\n\
             let dim = lay[2];\n\
             let ib = 3u + 2u * r;\n\
             let sb = ib + 1u + r;\n\
             var ioff = lay[ib];\n\
             var soff = lay[sb];\n\
             var rem = i;\n\
             var want = 0u;\n\
             for (var d = r; d > 0u; d = d - 1u) {{\n\
                 let c = rem % lay[2u + d];\n\
                 rem = rem / lay[2u + d];\n\
                 if (d - 1u == dim) {{ want = c; continue; }}\n\
                 // no index reaches this coordinate: the output keeps its zero\n\
                 if (c >= lay[2u + r + d]) {{ ys[i] = 0.0; return; }}\n\
                 ioff = ioff + c * lay[ib + d];\n\
                 soff = soff + c * lay[sb + d];\n\
             }}\n\
             let is = lay[ib + 1u + dim];\n\
             let ss = lay[sb + 1u + dim];\n\
             var acc = 0.0;\n\
             for (var t = 0u; t < lay[3u + r + dim]; t = t + 1u) {{\n\
                 if (ids[2u * (ioff + t * is)] == want) {{ acc = acc + xs[soff + t * ss]; }}\n\
             }}\n\
             ys[i] = acc;\n\
         }}\n"
    );
    let bufs = [&m, buf(idx, name)?, buf(src, name)?, buf(&out, name)?];
    launch(gpu, name, &source, &bufs, grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(out)
}

/// Whether no two elements of `l` share a storage index (a write through
/// it is then the same in any order).
pub(crate) fn non_overlapping(l: &Layout) -> bool {
    let mut dims: Vec<(usize, usize)> = l.dims().iter().zip(l.strides()).filter(|(n, _)| **n > 1).map(|(&n, &s)| (s, n)).collect();
    if l.numel() == 0 {
        return true;
    }
    dims.sort_unstable();
    let mut span = 1usize;
    for (s, n) in dims {
        if s < span {
            return false;
        }
        span = match s.checked_mul(n - 1).and_then(|v| v.checked_add(span)) {
            Some(v) => v,
            None => return false,
        };
    }
    true
}

/// Writes `src` (through `ls`) into `dst` (of its dtype, [`assignable`])
/// through `ld`, a layout whose elements do not overlap
/// ([`non_overlapping`]); `src` may share `dst`'s buffer (it is copied
/// first then).
///
/// Elements narrower than a word (f16, bf16, bool) share their word with
/// elements another invocation writes: each clears and sets only its own
/// bits, with atomic `and` and `or` (disjoint bits, so the order of two
/// invocations on one word does not matter).
pub(crate) fn assign(gpu: &Gpu, dst: &WgpuStorage, ld: &Layout, src: &WgpuStorage, ls: &Layout) -> Result<()> {
    let name = "assign";
    if dst.dtype != src.dtype {
        return Err(Error::DTypeMismatch { op: name, lhs: dst.dtype, rhs: src.dtype });
    }
    if !assignable(dst.dtype) {
        return Err(Error::msg(format!("{name}: no kernel moves {:?} elements", dst.dtype)));
    }
    validate::same_shape(name, ld, ls)?;
    validate::input(name, dst.len(), ld)?;
    validate::input(name, src.len(), ls)?;
    super::indexable(name, &[dst, src])?;
    let n = ld.numel();
    if n == 0 {
        return Ok(());
    }
    let shares = matches!((&dst.block, &src.block), (Ok(Some(a)), Ok(Some(b))) if std::sync::Arc::ptr_eq(a, b));
    let copied;
    let (src, ls) = if shares {
        copied = copy(gpu, src, ls)?;
        (&copied, Layout::contiguous(ls.shape().clone()))
    } else {
        (src, ls.clone())
    };
    let m = constants(gpu, bytemuck::cast_slice(&meta(name, &[ld, &ls])?));
    let (word, body) = match words(dst.dtype) {
        Some(w) => ("u32", format!("for (var w = 0u; w < {w}u; w = w + 1u) {{ ys[di * {w}u + w] = xs[si * {w}u + w]; }}\n")),
        None => {
            // elements per word, bits per element
            let (per, bits) = (4 / dst.dtype.size_in_bytes(), 8 * dst.dtype.size_in_bytes());
            let mask = (1u32 << bits) - 1;
            (
                "atomic<u32>",
                format!(
                    "let v = (xs[si / {per}u] >> ({bits}u * (si % {per}u))) & {mask}u;\n\
                     let shift = {bits}u * (di % {per}u);\n\
                     atomicAnd(&ys[di / {per}u], ~({mask}u << shift));\n\
                     atomicOr(&ys[di / {per}u], v << shift);\n"
                ),
            )
        }
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<u32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<{word}>;\n\
         {STRIDED}\n\
         {ENTRY}\
             let di = at(i, 0u);\n\
             let si = at(i, 1u);\n\
             {body}\
         }}\n"
    );
    let count = u32::try_from(n).map_err(|_| Error::msg(format!("{name}: {n} elements are past the GPU kernels' 32-bit indices")))?;
    launch(gpu, name, &source, &[&m, buf(src, name)?, buf(dst, name)?], grid(gpu, name, count.div_ceil(GROUP))?)
}

/// The parts (one [`assignable`] dtype) laid end to end along `dim`: each
/// part assigned into its slice of the output.
pub(crate) fn cat(gpu: &Gpu, parts: &[(&WgpuStorage, &Layout)], dim: usize) -> Result<WgpuStorage> {
    let name = "cat";
    let dtype = parts.first().map_or(DType::F32, |p| p.0.dtype);
    let shapes: Vec<&Shape> = parts.iter().map(|(_, l)| l.shape()).collect();
    let shape = validate::cat(&shapes, dim, dtype)?;
    for (s, l) in parts {
        validate::input(name, s.len(), l)?;
    }
    let n = validate::output(name, &shape, dtype)?;
    let out = WgpuStorage::uninit(gpu, name, dtype, n)?;
    let whole = Layout::contiguous(shape);
    let mut start = 0;
    for (s, l) in parts {
        let len = l.dims()[dim];
        assign(gpu, &out, &whole.slice(dim, start, len, 1)?, s, l)?;
        start += len;
    }
    Ok(out)
}

/// `s` through `layout`, contiguous, for any dtype of whole words (a bit
/// copy: NaN payloads and int64 values above 2^53 kept).
pub(crate) fn copy(gpu: &Gpu, s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
    let name = "copy_strided";
    validate::input(name, s.len(), layout)?;
    let out = WgpuStorage::uninit(gpu, name, s.dtype, validate::output(name, layout.shape(), s.dtype)?)?;
    assign(gpu, &out, &Layout::contiguous(layout.shape().clone()), s, layout)?;
    Ok(out)
}
