//! Fused elementwise programs: a chain of unary and binary ops over tensors
//! of one shape, run by [`crate::Backend::fused_elementwise`] in one pass
//! over memory instead of one pass (and one temporary) per op.
//!
//! A compiler (`autograd-jit`) builds them from recorded ops; a backend runs
//! them natively or falls back on [`unfused`], which runs each op as its own
//! primitive. Both must give the same bits: a fused kernel applies the same
//! per-element formula ([`crate::scalar`]) to the same operands, only
//! without writing the intermediates to memory.
//!
//! ```
//! use autograd_core::fusion::{ElementwiseProgram, Instr};
//! use autograd_core::{Backend, BinaryOp, HostData, Layout, RefBackend, Shape, UnaryOp};
//! // relu(a + b) and a + b's square, from two inputs
//! let prog = ElementwiseProgram::new(2, vec![
//!     Instr::Binary(BinaryOp::Add, 0, 1),   // register 2
//!     Instr::Unary(UnaryOp::Relu, 2),       // register 3
//!     Instr::Unary(UnaryOp::Square, 2),     // register 4
//! ], vec![3, 4]).unwrap();
//! let l = Layout::contiguous(Shape::from([2]));
//! let a = RefBackend::from_host(HostData::from(vec![1.0f64, -3.0]));
//! let b = RefBackend::from_host(HostData::from(vec![1.0f64, 1.0]));
//! let out = RefBackend::fused_elementwise(&prog, &[(&a, &l), (&b, &l)]).unwrap();
//! assert_eq!(RefBackend::to_host(&out[0], &l).unwrap().to_f64_vec(), vec![2.0, 0.0]);
//! assert_eq!(RefBackend::to_host(&out[1], &l).unwrap().to_f64_vec(), vec![4.0, 4.0]);
//! ```

use crate::{Backend, BinaryOp, Error, Layout, Result, Shape, UnaryOp};

/// One step of an [`ElementwiseProgram`]; its operands are register numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Instr {
    /// A unary op of one register.
    Unary(UnaryOp, usize),
    /// A binary op of two registers.
    Binary(BinaryOp, usize, usize),
}

impl Instr {
    /// The registers this step reads.
    pub fn operands(&self) -> impl Iterator<Item = usize> {
        let (a, b) = match *self {
            Instr::Unary(_, a) => (a, None),
            Instr::Binary(_, a, b) => (a, Some(b)),
        };
        std::iter::once(a).chain(b)
    }
}

/// Registers `0..inputs` hold the inputs; step `i` writes register
/// `inputs + i`; `outputs` lists the registers returned, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementwiseProgram {
    inputs: usize,
    instrs: Vec<Instr>,
    outputs: Vec<usize>,
    /// `last_use[r]`: the last step reading register `r` (outputs: `usize::MAX`).
    last_use: Vec<usize>,
}

impl ElementwiseProgram {
    /// Checks that every step reads only earlier registers and every output
    /// is a register, listed once.
    pub fn new(inputs: usize, instrs: Vec<Instr>, outputs: Vec<usize>) -> Result<Self> {
        let regs = inputs + instrs.len();
        for (i, ins) in instrs.iter().enumerate() {
            if let Some(bad) = ins.operands().find(|&r| r >= inputs + i) {
                return Err(Error::msg(format!("fused elementwise: step {i} reads register {bad}, not written before it")));
            }
        }
        let mut seen = vec![false; regs];
        for &o in &outputs {
            if o >= regs || std::mem::replace(&mut seen[o], true) {
                return Err(Error::msg(format!("fused elementwise: output register {o} is out of range or listed twice")));
            }
        }
        let mut last_use = vec![0usize; regs];
        for (i, ins) in instrs.iter().enumerate() {
            for r in ins.operands() {
                last_use[r] = i;
            }
        }
        for &o in &outputs {
            last_use[o] = usize::MAX;
        }
        Ok(ElementwiseProgram { inputs, instrs, outputs, last_use })
    }
    /// Number of inputs.
    pub fn inputs(&self) -> usize {
        self.inputs
    }
    /// The steps.
    pub fn instrs(&self) -> &[Instr] {
        &self.instrs
    }
    /// The registers returned.
    pub fn outputs(&self) -> &[usize] {
        &self.outputs
    }
    /// The last step that reads register `r` (`usize::MAX` for an output,
    /// 0 for a register nothing reads): when its space can be reused.
    pub fn last_use(&self, r: usize) -> usize {
        self.last_use[r]
    }
    /// Checks a call: as many inputs as the program has, all of one shape
    /// and one float dtype. Returns that shape.
    pub fn check<B: Backend>(&self, inputs: &[(&B::Storage, &Layout)]) -> Result<Shape> {
        if inputs.len() != self.inputs || inputs.is_empty() {
            return Err(Error::msg(format!(
                "fused elementwise: the program takes {} inputs (at least one), got {}",
                self.inputs,
                inputs.len()
            )));
        }
        let shape = inputs[0].1.shape().clone();
        let dtype = B::dtype(inputs[0].0);
        for (s, l) in inputs {
            crate::validate::input("fused_elementwise", B::len(s), l)?;
            crate::validate::same_shape("fused_elementwise", inputs[0].1, l)?;
            if B::dtype(s) != dtype {
                return Err(Error::DTypeMismatch { op: "fused_elementwise", lhs: dtype, rhs: B::dtype(s) });
            }
        }
        if !dtype.is_compute() {
            return Err(Error::UnsupportedDType { op: "fused_elementwise", dtype, hint: "fused programs compute in F32 or F64" });
        }
        Ok(shape)
    }
}

/// The default [`Backend::fused_elementwise`]: each step as its own
/// primitive (one temporary per step, freed after its last reader).
pub fn unfused<B: Backend>(program: &ElementwiseProgram, inputs: &[(&B::Storage, &Layout)]) -> Result<Vec<B::Storage>> {
    let shape = program.check::<B>(inputs)?;
    let out = Layout::contiguous(shape);
    let mut regs: Vec<Option<B::Storage>> = (0..program.inputs + program.instrs.len()).map(|_| None).collect();
    for (i, ins) in program.instrs.iter().enumerate() {
        let y = {
            let get = |r: usize| -> (&B::Storage, &Layout) {
                if r < program.inputs { inputs[r] } else { (regs[r].as_ref().expect("checked: written before it is read"), &out) }
            };
            match *ins {
                Instr::Unary(op, a) => {
                    let (s, l) = get(a);
                    B::unary(op, s, l)?
                }
                Instr::Binary(op, a, b) => {
                    let ((sa, la), (sb, lb)) = (get(a), get(b));
                    B::binary(op, sa, la, sb, lb)?
                }
            }
        };
        regs[program.inputs + i] = Some(y);
        for r in ins.operands() {
            if program.last_use[r] == i && r >= program.inputs {
                regs[r] = None;
            }
        }
    }
    program
        .outputs
        .iter()
        .map(|&r| match regs[r].take() {
            Some(s) => Ok(s),
            None => B::copy_strided(inputs[r].0, inputs[r].1),
        })
        .collect()
}
