//! Compiled programs' fused elementwise chains ([`ElementwiseProgram`]) as
//! one kernel: the WGSL is generated from the program, each step a call of
//! its op's formula from the same tables as the single-op kernels
//! ([`unary_expr`], [`binary_expr`]), the intermediates kept in registers.

use super::elementwise::{FLOAT, binary_expr, unary_expr};
use super::{ENTRY, GROUP, STRIDED, buf, constants, grid, launch, meta};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::fused_update::UpdateProgram;
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::{DType, Error, Layout, Result};
use std::fmt::Write;

/// Whether the program has a kernel on this device: its buffers fit the
/// bindings of one kernel.
pub(crate) fn fusable(gpu: &Gpu, program: &ElementwiseProgram) -> bool {
    let bindings = 1 + program.inputs() + program.outputs().len();
    bindings as u32 <= gpu.limits.max_storage_buffers_per_shader_stage
}

/// An f32 literal of exactly `v`'s bits (infinities and NaN included).
fn literal(v: f32) -> String {
    format!("bitcast<f32>({}u)", v.to_bits())
}

/// The kernel's WGSL.
fn source(program: &ElementwiseProgram) -> String {
    let (inputs, outputs) = (program.inputs(), program.outputs());
    let mut s = String::from("@group(0) @binding(0) var<storage, read> lay: array<u32>;\n");
    for k in 0..inputs {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read> x{k}: array<f32>;", 1 + k);
    }
    for k in 0..outputs.len() {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read_write> y{k}: array<f32>;", 1 + inputs + k);
    }
    s.push_str(STRIDED);
    s.push_str(FLOAT);
    s.push_str(&steps(program));
    s.push_str(ENTRY);
    for k in 0..inputs {
        let _ = writeln!(s, "    let r{k} = x{k}[at(i, {k}u)];");
    }
    s.push_str(&body(program));
    for (k, &o) in outputs.iter().enumerate() {
        let _ = writeln!(s, "    y{k}[i] = r{o};");
    }
    s.push_str("}\n");
    s
}

/// One WGSL function per step of the program (`step{j}`), its op's formula
/// with its parameters as exact literals.
fn steps(program: &ElementwiseProgram) -> String {
    let mut s = String::new();
    for (j, ins) in program.instrs().iter().enumerate() {
        let _ = match *ins {
            Instr::Unary(op, _) => {
                let (expr, p) = unary_expr(op);
                writeln!(s, "fn step{j}(x: f32) -> f32 {{ let p = array<f32, 2>({}, {}); return {expr}; }}", literal(p[0]), literal(p[1]))
            }
            Instr::Binary(op, ..) => writeln!(s, "fn step{j}(a: f32, b: f32) -> f32 {{ return {}; }}", binary_expr(op)),
        };
    }
    s
}

/// The program's steps as WGSL statements over registers `r{n}` (the
/// inputs' registers declared before; `lay`'s last word a zero, see
/// [`with_zero`]).
///
/// A step's result is read by the next steps with its bits XORed with a
/// zero word from memory: an identity the compiler cannot see
/// through. Without it a device compiler may contract a product of one
/// step with an addition of the next into one fused multiply-add, rounding
/// once where the unfused ops round twice (lavapipe did: a GELU of `x * x`
/// came out one ulp off the op-by-op result). The identity is on the bits,
/// not `r - 0.0`: a compiler that ignores the sign of zero rewrote
/// `0.0 - zero` to `-zero`, and `0 * x` came out `-0`.
fn body(program: &ElementwiseProgram) -> String {
    let mut s = String::from("    let zero = lay[arrayLength(&lay) - 1u];\n");
    let inputs = program.inputs();
    let operand = |r: usize| if r < inputs { format!("r{r}") } else { format!("bitcast<f32>(bitcast<u32>(r{r}) ^ zero)") };
    for (j, ins) in program.instrs().iter().enumerate() {
        let r = inputs + j;
        let _ = match *ins {
            Instr::Unary(_, a) => writeln!(s, "    let r{r} = step{j}({});", operand(a)),
            Instr::Binary(_, a, b) => writeln!(s, "    let r{r} = step{j}({}, {});", operand(a), operand(b)),
        };
    }
    s
}

/// A layout table ([`meta`]) with a zero word after it, [`body`]'s `zero`.
fn with_zero(op: &str, layouts: &[&Layout]) -> Result<Vec<u32>> {
    let mut table = meta(op, layouts)?;
    table.push(0);
    Ok(table)
}

/// Runs `program` on f32 inputs of one shape ([`fusable`] checked by the
/// caller): one launch, one contiguous buffer per output.
pub(crate) fn run(gpu: &Gpu, program: &ElementwiseProgram, inputs: &[(&WgpuStorage, &Layout)]) -> Result<Vec<WgpuStorage>> {
    let name = "fused_elementwise";
    let shape = program.check::<crate::Wgpu>(inputs)?;
    let storages: Vec<&WgpuStorage> = inputs.iter().map(|(s, _)| *s).collect();
    super::indexable(name, &storages)?;
    let n = autograd_core::validate::output(name, &shape, DType::F32)?;
    let outs: Vec<WgpuStorage> = program.outputs().iter().map(|_| WgpuStorage::uninit(gpu, name, DType::F32, n)).collect::<Result<_>>()?;
    if n == 0 {
        return Ok(outs);
    }
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l)| *l).collect();
    let m = constants(gpu, bytemuck::cast_slice(&with_zero(name, &layouts)?));
    let mut bufs = vec![&m];
    for s in storages.iter().copied().chain(&outs) {
        bufs.push(buf(s, name)?);
    }
    launch(gpu, name, &source(program), &bufs, grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(outs)
}

/// An optimizer's update program (`FusedUpdate::program`) on f32 buffers,
/// in place, as one kernel: parameter and states read and written through
/// their own bindings, the gradient through its layout, the constants from
/// one small buffer (7 storage bindings at most, whatever the rule).
/// `Ok(false)` where the adapter binds too few buffers: the caller runs
/// the program unfused then.
pub(crate) fn update(
    gpu: &Gpu,
    update: &UpdateProgram,
    param: &WgpuStorage,
    grad: &WgpuStorage,
    lg: &Layout,
    states: &[&mut WgpuStorage],
) -> Result<bool> {
    let name = "fused_update";
    let program = &update.program;
    let (ns, nc) = (states.len(), update.constants.len());
    if program.inputs() != 2 + ns + nc || program.outputs().len() != 1 + ns {
        return Err(Error::msg(format!(
            "{name}: a program of {} inputs and {} outputs for {ns} states and {nc} constants",
            program.inputs(),
            program.outputs().len()
        )));
    }
    if 4 + ns > gpu.limits.max_storage_buffers_per_shader_stage as usize {
        return Ok(false);
    }
    let mut all: Vec<&WgpuStorage> = vec![param, grad];
    all.extend(states.iter().map(|s| &**s));
    super::indexable(name, &all)?;
    let n = param.len();
    if n == 0 {
        return Ok(true);
    }
    let m = constants(gpu, bytemuck::cast_slice(&with_zero(name, &[lg])?));
    let cs: Vec<f32> = update.constants.iter().map(|&c| c as f32).collect();
    let cbuf = constants(gpu, bytemuck::cast_slice(&cs));
    let mut s = String::from(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> cs: array<f32>;\n\
         @group(0) @binding(2) var<storage, read> gs: array<f32>;\n\
         @group(0) @binding(3) var<storage, read_write> ps: array<f32>;\n",
    );
    for k in 0..ns {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read_write> s{k}: array<f32>;", 4 + k);
    }
    s.push_str(STRIDED);
    s.push_str(FLOAT);
    s.push_str(&steps(program));
    s.push_str(ENTRY);
    s.push_str("    let r0 = ps[i];\n    let r1 = gs[at(i, 0u)];\n");
    for k in 0..ns {
        let _ = writeln!(s, "    let r{} = s{k}[i];", 2 + k);
    }
    for j in 0..nc {
        let _ = writeln!(s, "    let r{} = cs[{j}u];", 2 + ns + j);
    }
    s.push_str(&body(program));
    let outs = program.outputs();
    let _ = writeln!(s, "    ps[i] = r{};", outs[0]);
    for k in 0..ns {
        let _ = writeln!(s, "    s{k}[i] = r{};", outs[1 + k]);
    }
    s.push_str("}\n");
    let mut bufs = vec![&m, &cbuf, buf(grad, name)?, buf(param, name)?];
    for st in states {
        bufs.push(buf(st, name)?);
    }
    launch(gpu, name, &s, &bufs, grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(true)
}
