//! Batched f32 matrix products through any strides: 16 x 16 output tiles,
//! each workgroup staging 16 x 16 blocks of both operands in workgroup
//! memory (every element read from device memory once per tile instead of
//! 16 times), the batch on the grid's third dimension.

use super::{buf, constants};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{DType, Error, Layout, Result, validate};

const TILE: u32 = 16;

const SOURCE: &str = r#"
@group(0) @binding(0) var<storage, read> lay: array<u32>;
@group(0) @binding(1) var<storage, read> xa: array<f32>;
@group(0) @binding(2) var<storage, read> xb: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

// meta: m, n, k, r (batch rank), z0 (first batch item of this launch),
// batch dims (r), then per operand: offset, row stride, column stride,
// batch strides (r)
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = lay[0]; let n = lay[1]; let k = lay[2]; let r = lay[3];
    let bi = lay[4] + wg.z;
    let abase = 5u + r;
    let bbase = abase + 3u + r;
    var aoff = lay[abase];
    var boff = lay[bbase];
    var rem = bi;
    for (var d = r; d > 0u; d = d - 1u) {
        let nd = lay[4u + d];
        let idx = rem % nd;
        rem = rem / nd;
        aoff = aoff + idx * lay[abase + 2u + d];
        boff = boff + idx * lay[bbase + 2u + d];
    }
    let ars = lay[abase + 1u]; let acs = lay[abase + 2u];
    let brs = lay[bbase + 1u]; let bcs = lay[bbase + 2u];
    let row = wg.y * 16u + lid.y;
    let col = wg.x * 16u + lid.x;
    var acc = 0.0;
    for (var t = 0u; t < k; t = t + 16u) {
        let ka = t + lid.x;
        var va = 0.0;
        if (row < m && ka < k) { va = xa[aoff + row * ars + ka * acs]; }
        ta[lid.y][lid.x] = va;
        let kb = t + lid.y;
        var vb = 0.0;
        if (kb < k && col < n) { vb = xb[boff + kb * brs + col * bcs]; }
        tb[lid.y][lid.x] = vb;
        workgroupBarrier();
        for (var p = 0u; p < 16u; p = p + 1u) {
            acc = acc + ta[lid.y][p] * tb[p][lid.x];
        }
        workgroupBarrier();
    }
    if (row < m && col < n) {
        out[(bi * m + row) * n + col] = acc;
    }
}
"#;

/// `[batch.., m, k] x [batch.., k, n]` for f32 operands on the device.
pub(crate) fn matmul(gpu: &Gpu, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    let op = "matmul";
    validate::input(op, a.len(), la)?;
    validate::input(op, b.len(), lb)?;
    let (nb, m, k, n) = validate::matmul(la, lb, DType::F32)?;
    let out = WgpuStorage::uninit(gpu, op, DType::F32, nb * m * n)?;
    if nb * m * n == 0 {
        return Ok(out);
    }
    if k == 0 {
        return crate::kernels::elementwise::fill(gpu, &out, 0.0);
    }
    let fits = |v: usize| {
        u32::try_from(v)
            .map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices ({:?} x {:?})", la.dims(), lb.dims())))
    };
    // the output's index (bi m + row) n + col and the operands' offsets are u32
    super::indexable(op, &[a, b, &out])?;
    let r = la.rank() - 2;
    let (xs, ys) = (buf(a, op)?, buf(b, op)?);
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    let (gx, gy) = (n.div_ceil(TILE as usize), m.div_ceil(TILE as usize));
    if gx > max || gy > max {
        return Err(Error::msg(format!("{op}: {m} x {n} outputs need more than {max} tiles along a side on {}", gpu.info.name)));
    }
    // a dim of one element is never stepped: any stride will do
    let stride = |l: &Layout, d: usize| if l.dims()[d] == 1 { Ok(0) } else { fits(l.strides()[d]) };
    let mut z0 = 0;
    while z0 < nb {
        let count = (nb - z0).min(max);
        let mut meta = vec![fits(m)?, fits(n)?, fits(k)?, fits(r)?, fits(z0)?];
        for d in 0..r {
            meta.push(fits(la.dims()[d])?);
        }
        for l in [la, lb] {
            meta.extend([fits(l.offset())?, stride(l, r)?, stride(l, r + 1)?]);
            for d in 0..r {
                meta.push(stride(l, d)?);
            }
        }
        let mbuf = constants(gpu, bytemuck::cast_slice(&meta));
        super::launch3(gpu, op, SOURCE, &[&mbuf, xs, ys, buf(&out, op)?], (gx as u32, gy as u32, count as u32))?;
        z0 += count;
    }
    Ok(out)
}
