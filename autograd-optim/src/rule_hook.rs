//! The update rules as core's optimizer-agnostic hook ([`FusedUpdate`]):
//! resolved from their scalars, applied to host slices, and written as
//! elementwise programs ([`UpdateProgram`]) for a backend that runs an
//! optimizer step as one kernel on its own memory.
//!
//! Each program follows [`UpdateRule::apply`] op for op (the same
//! constants, rounded to the parameter's dtype by the backend, in the same
//! order; IEEE sums and products commute exactly, so only the grouping
//! matters), so a device that rounds as the host does gives the host's
//! numbers. AMSGrad's running maximum is the table's `Maximum` (NaN
//! propagates, as `torch.maximum` in PyTorch's Adam).

use crate::rule::UpdateRule;
use autograd_core::fused_update::{FusedUpdate, UpdateProgram};
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::{BinaryOp, UnaryOp};
use autograd_core::{Error, Result};

impl FusedUpdate for UpdateRule {
    fn num_states(&self) -> usize {
        self.state_names().len()
    }
    fn num_scalars(&self) -> usize {
        match self {
            UpdateRule::Sgd { .. } => 8,
            UpdateRule::Adam { .. } => 10,
            UpdateRule::RmsProp { .. } => 9,
            UpdateRule::Adagrad { .. } => 7,
        }
    }
    /// Counts the step (`scalars[0] += 1`), consumes the fresh-state flag
    /// and reads every number of the rule from the scalars.
    fn resolve(&self, scalars: &mut [f64]) -> Result<Self> {
        // The length first: `resolve` is public, a short slice is an `Err`.
        if scalars.len() != self.num_scalars() {
            return Err(Error::msg(format!("optimizer update: {} scalars given, the rule reads {}", scalars.len(), self.num_scalars())));
        }
        let before = scalars[0];
        if !(before >= 0.0 && before < 2f64.powi(53) && before.fract() == 0.0) {
            return Err(Error::msg(format!("optimizer update: the scalars {scalars:?} do not hold a step count")));
        }
        let step = before as u64 + 1;
        let fresh = scalars[1] != 0.0;
        let rule = self.with_scalars(scalars, step, fresh);
        scalars[0] = step as f64;
        scalars[1] = 0.0;
        Ok(rule)
    }
    fn program(&self) -> Option<UpdateProgram> {
        program(self)
    }
    fn apply_f32(&self, p: &mut [f32], g: &[f32], states: &mut [&mut [f32]]) {
        self.apply(p, g, states)
    }
    fn apply_f64(&self, p: &mut [f64], g: &[f64], states: &mut [&mut [f64]]) {
        self.apply(p, g, states)
    }
}

/// A register while the program is written: an input buffer, a constant,
/// or a step's result (numbered at the end, once the constants are known).
#[derive(Clone, Copy, Debug)]
enum Reg {
    Input(usize),
    Const(usize),
    Step(usize),
}

/// A step's op.
#[derive(Clone, Copy, Debug)]
enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
}

#[derive(Default)]
struct Builder {
    steps: Vec<(Op, Reg, Option<Reg>)>,
    constants: Vec<f64>,
}

impl Builder {
    fn constant(&mut self, v: f64) -> Reg {
        self.constants.push(v);
        Reg::Const(self.constants.len() - 1)
    }
    fn unary(&mut self, op: UnaryOp, a: Reg) -> Reg {
        self.steps.push((Op::Unary(op), a, None));
        Reg::Step(self.steps.len() - 1)
    }
    fn binary(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        self.steps.push((Op::Binary(op), a, Some(b)));
        Reg::Step(self.steps.len() - 1)
    }
    fn add(&mut self, a: Reg, b: Reg) -> Reg {
        self.binary(BinaryOp::Add, a, b)
    }
    fn mul(&mut self, a: Reg, b: Reg) -> Reg {
        self.binary(BinaryOp::Mul, a, b)
    }
    fn div(&mut self, a: Reg, b: Reg) -> Reg {
        self.binary(BinaryOp::Div, a, b)
    }
    /// `a * ca` for a constant `ca`.
    fn scale(&mut self, a: Reg, ca: f64) -> Reg {
        let c = self.constant(ca);
        self.mul(a, c)
    }
    /// PyTorch's lerp with a constant weight (its branch taken here).
    fn lerp(&mut self, a: Reg, b: Reg, w: f64) -> Reg {
        let d = self.binary(BinaryOp::Sub, b, a);
        if w.abs() < 0.5 {
            let wd = self.scale(d, w);
            self.add(a, wd)
        } else {
            let dw = self.scale(d, 1.0 - w);
            self.binary(BinaryOp::Sub, b, dw)
        }
    }
    /// The program over `inputs` buffers returning `outputs`.
    fn finish(self, inputs: usize, outputs: &[Reg]) -> Option<UpdateProgram> {
        let consts = self.constants.len();
        let number = |r: Reg| match r {
            Reg::Input(i) => i,
            Reg::Const(j) => inputs + j,
            Reg::Step(k) => inputs + consts + k,
        };
        let instrs = self
            .steps
            .iter()
            .map(|&(op, a, b)| match (op, b) {
                (Op::Unary(u), _) => Instr::Unary(u, number(a)),
                (Op::Binary(bin), Some(b)) => Instr::Binary(bin, number(a), number(b)),
                (Op::Binary(_), None) => unreachable!("a binary step has two operands"),
            })
            .collect();
        let program = ElementwiseProgram::new(inputs + consts, instrs, outputs.iter().map(|&r| number(r)).collect()).ok()?;
        Some(UpdateProgram { program, constants: self.constants })
    }
}

/// [`UpdateRule`]'s program (`None` only where the program would not
/// validate).
fn program(rule: &UpdateRule) -> Option<UpdateProgram> {
    let mut b = Builder::default();
    let (p, g) = (Reg::Input(0), Reg::Input(1));
    let signed = |b: &mut Builder, maximize: bool| if maximize { b.unary(UnaryOp::Neg, g) } else { g };
    let decayed = |b: &mut Builder, g: Reg, p: Reg, wd: f64| {
        if wd != 0.0 {
            let wp = b.scale(p, wd);
            b.add(g, wp)
        } else {
            g
        }
    };
    match *rule {
        UpdateRule::Sgd { lr, momentum, dampening, nesterov, weight_decay, maximize, init_buffer } => {
            let g0 = signed(&mut b, maximize);
            let d = decayed(&mut b, g0, p, weight_decay);
            if momentum == 0.0 {
                let c = b.constant(-lr);
                let step = b.mul(c, d);
                let p1 = b.add(p, step);
                return b.finish(2, &[p1]);
            }
            let buf = Reg::Input(2);
            let b1 = if init_buffer {
                d
            } else {
                let bm = b.scale(buf, momentum);
                let c = b.constant(1.0 - dampening);
                let dd = b.mul(c, d);
                b.add(bm, dd)
            };
            let step = if nesterov {
                let c = b.constant(momentum);
                let mb = b.mul(c, b1);
                b.add(d, mb)
            } else {
                b1
            };
            let c = b.constant(-lr);
            let ls = b.mul(c, step);
            let p1 = b.add(p, ls);
            b.finish(3, &[p1, b1])
        }
        UpdateRule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, maximize, step } => {
            let t = step as f64;
            let bc1 = 1.0 - beta1.powf(t);
            let bc2_sqrt = (1.0 - beta2.powf(t)).sqrt();
            let (m, v) = (Reg::Input(2), Reg::Input(3));
            let mut g1 = signed(&mut b, maximize);
            let mut pi = p;
            if weight_decay != 0.0 && decoupled_weight_decay {
                pi = b.scale(p, 1.0 - lr * weight_decay);
            }
            if weight_decay != 0.0 && !decoupled_weight_decay {
                g1 = decayed(&mut b, g1, pi, weight_decay);
            }
            let mi = b.lerp(m, g1, 1.0 - beta1);
            let vb = b.scale(v, beta2);
            let gg = b.mul(g1, g1);
            let c = b.constant(1.0 - beta2);
            let wgg = b.mul(c, gg);
            let vi = b.add(vb, wgg);
            // AMSGrad divides by the running maximum of the second moment
            let second = if amsgrad { b.binary(BinaryOp::Maximum, Reg::Input(4), vi) } else { vi };
            let root = b.unary(UnaryOp::Sqrt, second);
            let c = b.constant(bc2_sqrt);
            let scaled = b.div(root, c);
            let c = b.constant(eps);
            let denom = b.add(scaled, c);
            let ratio = b.div(mi, denom);
            let c = b.constant(-(lr / bc1));
            let upd = b.mul(c, ratio);
            let p1 = b.add(pi, upd);
            if amsgrad { b.finish(5, &[p1, mi, vi, second]) } else { b.finish(4, &[p1, mi, vi]) }
        }
        UpdateRule::RmsProp { lr, alpha, eps, weight_decay, momentum, centered, maximize } => {
            let g0 = signed(&mut b, maximize);
            let g1 = decayed(&mut b, g0, p, weight_decay);
            let sq = Reg::Input(2);
            let mut next = 3;
            let buf = (momentum > 0.0).then(|| {
                next += 1;
                Reg::Input(next - 1)
            });
            let gavg = centered.then_some(Reg::Input(next));
            let inputs = 3 + usize::from(buf.is_some()) + usize::from(gavg.is_some());
            let sa = b.scale(sq, alpha);
            let gg = b.mul(g1, g1);
            let c = b.constant(1.0 - alpha);
            let wgg = b.mul(c, gg);
            let s = b.add(sa, wgg);
            let mut outs = vec![s];
            let root = match gavg {
                Some(ga) => {
                    let mm = b.lerp(ga, g1, 1.0 - alpha);
                    let m2 = b.mul(mm, mm);
                    let neg = b.unary(UnaryOp::Neg, m2);
                    let var = b.add(s, neg);
                    outs.push(mm);
                    b.unary(UnaryOp::Sqrt, var)
                }
                None => b.unary(UnaryOp::Sqrt, s),
            };
            let c = b.constant(eps);
            let avg = b.add(root, c);
            let c = b.constant(-lr);
            let p1 = match buf {
                Some(bf) => {
                    let bm = b.scale(bf, momentum);
                    let q = b.div(g1, avg);
                    let x = b.add(bm, q);
                    // states in order: square_avg, momentum_buffer, grad_avg
                    outs.insert(1, x);
                    let lx = b.mul(c, x);
                    b.add(p, lx)
                }
                None => {
                    let q = b.div(g1, avg);
                    let lq = b.mul(c, q);
                    b.add(p, lq)
                }
            };
            outs.insert(0, p1);
            b.finish(inputs, &outs)
        }
        UpdateRule::Adagrad { lr, lr_decay, eps, weight_decay, maximize, step } => {
            let clr = lr / (1.0 + (step as f64 - 1.0) * lr_decay);
            let g0 = signed(&mut b, maximize);
            let g1 = decayed(&mut b, g0, p, weight_decay);
            let gg = b.mul(g1, g1);
            let s = b.add(Reg::Input(2), gg);
            let root = b.unary(UnaryOp::Sqrt, s);
            let c = b.constant(eps);
            let den = b.add(root, c);
            let q = b.div(g1, den);
            let c = b.constant(-clr);
            let lq = b.mul(c, q);
            let p1 = b.add(p, lq);
            b.finish(3, &[p1, s])
        }
    }
}
