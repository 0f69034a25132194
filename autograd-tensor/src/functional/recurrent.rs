//! Recurrent cells and layers: PyTorch's `torch.lstm_cell`, and one
//! direction of one LSTM layer over a whole sequence as ONE graph node.
//!
//! Why a node per layer: run step by step, a layer records a dozen nodes
//! per step (two products, the gate activations, the cell update), each
//! with its own temporaries, and its weight gradients are `L` small
//! products summed. As one node (PyTorch's CPU LSTM is one oneDNN
//! primitive; cuDNN's is one call) the input projection of every step is
//! one product, each step is one `addmm` and one fused elementwise program
//! ([`Backend::fused_elementwise`]: the gates and the cell update without
//! temporaries), and backward is one fused program and one product per step,
//! then the weight and input gradients as three products over the whole
//! sequence. Every backend runs it (the fused program's default is the
//! unfused primitives).
//!
//! The composite (the cell written with differentiable ops, step by step)
//! stays the definition: it is what runs under forward mode, autocast and
//! low-precision dtypes, and what a `create_graph` backward differentiates
//! (recomputed from the saved inputs), so every order of derivative holds.

use crate::Tensor;
use crate::functional::try_linear;
use crate::grad_mode::{is_grad_enabled, no_grad};
use crate::node::{BackwardCtx, BackwardOp, SavedTensor};
use crate::ops::program::{self, program};
use crate::{GradOptions, autograd};
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::{Backend, BinaryOp, Error, Result, Shape, UnaryOp};
use std::panic::Location;

/// PyTorch's `torch.lstm_cell`: one LSTM step from `(h, c)` on `x`
/// (`[N, input]`), gates in PyTorch's order (input, forget, cell, output):
/// `c' = f c + i g`, `h' = o tanh(c')`. Returns `(h', c')`.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::zeros([2, 3]);
/// let (h, c) = (Tensor::<RefBackend>::zeros([2, 4]), Tensor::<RefBackend>::ones([2, 4]));
/// let (w_ih, w_hh) = (Tensor::<RefBackend>::zeros([16, 3]), Tensor::<RefBackend>::zeros([16, 4]));
/// let (h2, c2) = F::try_lstm_cell(&x, &h, &c, &w_ih, &w_hh, None, None).unwrap();
/// // every gate at sigmoid(0) = 1/2, g = tanh(0) = 0: c' = c / 2, h' = tanh(1/2) / 2
/// assert_eq!(c2.to_vec::<f32>(), vec![0.5; 8]);
/// assert!((h2.to_vec::<f32>()[0] - 0.5f32.tanh() / 2.0).abs() < 1e-7);
/// ```
#[track_caller]
pub fn try_lstm_cell<B: Backend>(
    x: &Tensor<B>,
    h: &Tensor<B>,
    c: &Tensor<B>,
    w_ih: &Tensor<B>,
    w_hh: &Tensor<B>,
    b_ih: Option<&Tensor<B>>,
    b_hh: Option<&Tensor<B>>,
) -> Result<(Tensor<B>, Tensor<B>)> {
    let xi = try_linear(x, w_ih, b_ih)?;
    cell_on_projection(&xi, h, c, w_hh, b_hh)
}

/// The composite cell on the projected input `xi = x W_ih^T + b_ih`.
fn cell_on_projection<B: Backend>(
    xi: &Tensor<B>,
    h: &Tensor<B>,
    c: &Tensor<B>,
    w_hh: &Tensor<B>,
    b_hh: Option<&Tensor<B>>,
) -> Result<(Tensor<B>, Tensor<B>)> {
    let g = xi.try_add(&try_linear(h, w_hh, b_hh)?)?.try_chunk(4, -1)?;
    let (i, f, gg, o) = (g[0].try_sigmoid()?, g[1].try_sigmoid()?, g[2].try_tanh()?, g[3].try_sigmoid()?);
    let c2 = f.try_mul(c)?.try_add(&i.try_mul(&gg)?)?;
    Ok((o.try_mul(&c2.try_tanh()?)?, c2))
}

/// The weights of one LSTM layer and direction, PyTorch's layouts:
/// `w_ih` `[4 H, input]`, `w_hh` `[4 H, H]`, biases `[4 H]`.
#[derive(Clone, Copy)]
pub struct RecurrentWeights<'a, B: Backend> {
    /// Input-to-hidden weights.
    pub w_ih: &'a Tensor<B>,
    /// Hidden-to-hidden weights.
    pub w_hh: &'a Tensor<B>,
    /// Input-to-hidden bias, if any.
    pub b_ih: Option<&'a Tensor<B>>,
    /// Hidden-to-hidden bias, if any.
    pub b_hh: Option<&'a Tensor<B>>,
}

/// One direction of one LSTM layer over a sequence: `x` `[L, N, input]`
/// from the state `(h0, c0)` (`[N, H]` each), steps taken backwards in
/// time if `reverse`. `mask` (`[L, N, 1]`, ones and zeros) marks the live
/// steps of each sequence as `pack_padded_sequence` does: past a
/// sequence's end its state is kept and its output is zero.
/// Returns the outputs `[L, N, H]` and the final `(h, c)`.
///
/// Recorded as one node (`LstmLayerBackward0`); see the module's doc.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let (l, n, input, hidden) = (5, 2, 3, 4);
/// let x = Tensor::<RefBackend>::ones([l, n, input]);
/// let h0 = Tensor::<RefBackend>::zeros([n, hidden]);
/// let w_ih = Tensor::<RefBackend>::full([4 * hidden, input], 0.1).requires_grad_(true);
/// let w_hh = Tensor::<RefBackend>::full([4 * hidden, hidden], -0.1);
/// let w = F::RecurrentWeights { w_ih: &w_ih, w_hh: &w_hh, b_ih: None, b_hh: None };
/// let (out, h, c) = F::try_lstm_layer(&x, &h0, &h0, &w, false, None).unwrap();
/// assert_eq!((out.dims(), h.dims(), c.dims()), (&[5, 2, 4][..], &[2, 4][..], &[2, 4][..]));
/// // the last output is the final hidden state
/// assert_eq!(out.try_select(0, 4).unwrap().to_vec::<f32>(), h.to_vec::<f32>());
/// out.sum().backward().unwrap();
/// assert_eq!(w_ih.grad().unwrap().dims(), &[16, 3]);
/// ```
#[track_caller]
pub fn try_lstm_layer<B: Backend>(
    x: &Tensor<B>,
    h0: &Tensor<B>,
    c0: &Tensor<B>,
    w: &RecurrentWeights<'_, B>,
    reverse: bool,
    mask: Option<&Tensor<B>>,
) -> Result<(Tensor<B>, Tensor<B>, Tensor<B>)> {
    let loc = Location::caller();
    let sizes = check(x, h0, c0, w, mask).map_err(|e| e.at(loc))?;
    let inputs = LayerInputs { x, h0, c0, w: *w };
    let all = inputs.all();
    let dtype = x.dtype();
    let fused = dtype.is_compute()
        && all.iter().all(|t| t.dtype() == dtype && t.tangent().is_none())
        && mask.is_none_or(|m| m.dtype() == dtype && m.tangent().is_none())
        && !crate::autocast::is_autocast_enabled();
    let packed = if fused { fused_layer(&inputs, sizes, reverse, mask)? } else { composite_layer(&inputs, sizes, reverse, mask)? };
    unpack(&packed, sizes)
}

/// Sequence length, batch, input and hidden sizes.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    len: usize,
    batch: usize,
    input: usize,
    hidden: usize,
}

impl Sizes {
    /// Elements of the packed result: every output, then `h_n`, then `c_n`.
    fn packed(&self) -> usize {
        (self.len + 2) * self.batch * self.hidden
    }
    /// The time steps in the order they are taken.
    fn order(&self, reverse: bool) -> Vec<usize> {
        let len = self.len;
        (0..len).map(|k| if reverse { len - 1 - k } else { k }).collect()
    }
}

fn check<B: Backend>(
    x: &Tensor<B>,
    h0: &Tensor<B>,
    c0: &Tensor<B>,
    w: &RecurrentWeights<'_, B>,
    mask: Option<&Tensor<B>>,
) -> Result<Sizes> {
    let bad = |msg: String| Error::invalid_shape("lstm", msg);
    if x.rank() != 3 {
        return Err(bad(format!("expected an input of shape (L, N, input), got {:?}", x.dims())));
    }
    let (len, batch, input) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    if w.w_hh.rank() != 2 || w.w_hh.dims()[0] != 4 * w.w_hh.dims()[1] {
        return Err(bad(format!("w_hh must be [4 H, H], got {:?}", w.w_hh.dims())));
    }
    let hidden = w.w_hh.dims()[1];
    if w.w_ih.dims() != [4 * hidden, input] {
        return Err(bad(format!("w_ih must be [4 H, input] = [{}, {input}], got {:?}", 4 * hidden, w.w_ih.dims())));
    }
    for (what, b) in [("b_ih", w.b_ih), ("b_hh", w.b_hh)] {
        if let Some(b) = b
            && b.dims() != [4 * hidden]
        {
            return Err(bad(format!("{what} must be [4 H] = [{}], got {:?}", 4 * hidden, b.dims())));
        }
    }
    for (what, s) in [("h0", h0), ("c0", c0)] {
        if s.dims() != [batch, hidden] {
            return Err(bad(format!("{what} must be [N, H] = [{batch}, {hidden}], got {:?}", s.dims())));
        }
    }
    if let Some(m) = mask
        && m.dims() != [len, batch, 1]
    {
        return Err(bad(format!("the mask must be [L, N, 1] = [{len}, {batch}, 1], got {:?}", m.dims())));
    }
    let sizes = Sizes { len, batch, input, hidden };
    // the packed result's size, checked once here (every other size is below it or below x's)
    len.checked_add(2)
        .and_then(|l| l.checked_mul(batch))
        .and_then(|e| e.checked_mul(hidden))
        .and_then(|e| e.checked_mul(4))
        .ok_or_else(|| bad(format!("an output of {len} steps x {batch} x {hidden} overflows")))?;
    Ok(sizes)
}

/// The layer's differentiable inputs, in the node's input order.
struct LayerInputs<'a, B: Backend> {
    x: &'a Tensor<B>,
    h0: &'a Tensor<B>,
    c0: &'a Tensor<B>,
    w: RecurrentWeights<'a, B>,
}

impl<B: Backend> LayerInputs<'_, B> {
    fn all(&self) -> Vec<&Tensor<B>> {
        [self.x, self.h0, self.c0, self.w.w_ih, self.w.w_hh].into_iter().chain(self.w.b_ih).chain(self.w.b_hh).collect()
    }
}

/// The outputs, `h_n` and `c_n` as views of the packed result.
fn unpack<B: Backend>(packed: &Tensor<B>, s: Sizes) -> Result<(Tensor<B>, Tensor<B>, Tensor<B>)> {
    let (nh, lnh) = (s.batch * s.hidden, s.len * s.batch * s.hidden);
    let out = packed.try_narrow(0, 0, lnh)?.try_reshape_to(&Shape::from([s.len, s.batch, s.hidden]))?;
    let h = packed.try_narrow(0, lnh, nh)?.try_reshape_to(&Shape::from([s.batch, s.hidden]))?;
    let c = packed.try_narrow(0, lnh + nh, nh)?.try_reshape_to(&Shape::from([s.batch, s.hidden]))?;
    Ok((out, h, c))
}

/// The packed result of the composite: step by step with differentiable ops.
fn composite_layer<B: Backend>(inputs: &LayerInputs<'_, B>, s: Sizes, reverse: bool, mask: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let w = &inputs.w;
    let (mut h, mut c) = (inputs.h0.clone(), inputs.c0.clone());
    let mut outs: Vec<Option<Tensor<B>>> = vec![None; s.len];
    for t in s.order(reverse) {
        let xi = try_linear(&inputs.x.try_select(0, t as isize)?, w.w_ih, w.b_ih)?;
        let (h2, c2) = cell_on_projection(&xi, &h, &c, w.w_hh, w.b_hh)?;
        match mask {
            None => {
                outs[t] = Some(h2.clone());
                (h, c) = (h2, c2);
            }
            Some(m) => {
                // past a sequence's end: the state is kept and the output is zero
                let m = m.try_select(0, t as isize)?;
                let keep = |new: &Tensor<B>, old: &Tensor<B>| old.try_add(&m.try_mul(&new.try_sub(old)?)?);
                outs[t] = Some(h2.try_mul(&m)?);
                (h, c) = (keep(&h2, &h)?, keep(&c2, &c)?);
            }
        }
    }
    let mut flat: Vec<Tensor<B>> = outs.into_iter().map(|o| o.expect("every step ran").try_reshape(&[-1])).collect::<Result<_>>()?;
    flat.push(h.try_reshape(&[-1])?);
    flat.push(c.try_reshape(&[-1])?);
    Tensor::try_cat(&flat, 0)
}

/// The gates and the cell update of one step, one pass: inputs the four
/// gate pre-activations (views of one `[N, 4 H]` product) and `c`; outputs
/// `h'`, `c'`, and for backward `i`, `f`, `g`, `o`, `tanh(c')`.
fn cell_forward() -> &'static ElementwiseProgram {
    use BinaryOp::{Add, Mul};
    use Instr::{Binary, Unary};
    use UnaryOp::{Sigmoid, Tanh};
    program!(
        5,
        [
            Unary(Sigmoid, 0),  // 5 i
            Unary(Sigmoid, 1),  // 6 f
            Unary(Tanh, 2),     // 7 g
            Unary(Sigmoid, 3),  // 8 o
            Binary(Mul, 6, 4),  // 9 f c
            Binary(Mul, 5, 7),  // 10 i g
            Binary(Add, 9, 10), // 11 c'
            Unary(Tanh, 11),    // 12 tanh c'
            Binary(Mul, 8, 12), // 13 h'
        ],
        vec![13, 11, 5, 6, 7, 8, 12]
    )
}

/// The cell's backward, one pass: inputs `dh'`, `dc'`, `i`, `f`, `g`, `o`,
/// `tanh(c')`, `c`; outputs the four gate pre-activation gradients and `dc`.
/// `s' = s - s^2` for the sigmoids, `t' = 1 - t^2` for the tanhs (written
/// `d - d t^2`: programs have no constants).
fn cell_backward() -> &'static ElementwiseProgram {
    use BinaryOp::{Add, Mul, Sub};
    use Instr::{Binary, Unary};
    use UnaryOp::Square;
    program!(
        8,
        [
            Binary(Mul, 0, 5),   // 8 d tanh(c') = dh o
            Binary(Mul, 0, 6),   // 9 do = dh tanh(c')
            Unary(Square, 6),    // 10 tanh(c')^2
            Binary(Mul, 8, 10),  // 11
            Binary(Sub, 8, 11),  // 12 through the tanh
            Binary(Add, 1, 12),  // 13 dc' in all
            Binary(Mul, 13, 3),  // 14 dc = dc' f
            Binary(Mul, 13, 7),  // 15 df = dc' c
            Binary(Mul, 13, 4),  // 16 di = dc' g
            Binary(Mul, 13, 2),  // 17 dg = dc' i
            Unary(Square, 2),    // 18 i^2
            Binary(Sub, 2, 18),  // 19 i (1 - i)
            Binary(Mul, 16, 19), // 20 d pre-i
            Unary(Square, 3),    // 21
            Binary(Sub, 3, 21),  // 22 f (1 - f)
            Binary(Mul, 15, 22), // 23 d pre-f
            Unary(Square, 4),    // 24 g^2
            Binary(Mul, 17, 24), // 25
            Binary(Sub, 17, 25), // 26 d pre-g
            Unary(Square, 5),    // 27
            Binary(Sub, 5, 27),  // 28 o (1 - o)
            Binary(Mul, 9, 28),  // 29 d pre-o
        ],
        vec![20, 23, 26, 29, 14]
    )
}

/// What one step keeps for backward: the activated gates, `tanh(c')`, and
/// the state it started from.
struct StepWork<B: Backend> {
    /// `i`, `f`, `g`, `o`, `tanh(c')`.
    acts: Vec<Tensor<B>>,
    h_prev: Tensor<B>,
    c_prev: Tensor<B>,
}

/// The fused forward: one product for every step's input projection, then
/// per step one `addmm` and one fused program; recorded as one node.
fn fused_layer<B: Backend>(inputs: &LayerInputs<'_, B>, s: Sizes, reverse: bool, mask: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let w = &inputs.w;
    let rows = s.len * s.batch;
    let (packed, x2, work) = no_grad(|| -> Result<_> {
        let x2 = inputs.x.try_reshape_to(&Shape::from([rows, s.input]))?.try_contiguous()?;
        let bias = match (w.b_ih, w.b_hh) {
            (Some(a), Some(b)) => Some(a.try_add(b)?),
            (b, None) | (None, b) => b.cloned(),
        };
        // every step's x W_ih^T + b_ih + b_hh: [L N, 4 H]
        let proj = try_linear(&x2, w.w_ih, bias.as_ref())?.try_contiguous()?;
        let whh_t = w.w_hh.layout().transpose(0, 1)?;
        let (mut h, mut c) = (inputs.h0.clone(), inputs.c0.clone());
        let mut outs: Vec<Option<Tensor<B>>> = vec![None; s.len];
        let mut work: Vec<Option<StepWork<B>>> = (0..s.len).map(|_| None).collect();
        for t in s.order(reverse) {
            let lp = proj.layout().slice(0, t * s.batch, s.batch, 1)?;
            let gates = B::addmm(&proj.storage(), &lp, &h.storage(), h.layout(), &w.w_hh.storage(), &whh_t)?;
            let gates = Tensor::from_storage(gates, Shape::from([s.batch, 4 * s.hidden]));
            let gates: Vec<Tensor<B>> = (0..4).map(|q| gates.try_narrow(1, q * s.hidden, s.hidden)).collect::<Result<_>>()?;
            let mut res = program::run(cell_forward(), &[&gates[0], &gates[1], &gates[2], &gates[3], &c])?.into_iter();
            let (h2, c2) = (res.next().expect("h'"), res.next().expect("c'"));
            work[t] = Some(StepWork { acts: res.collect(), h_prev: h.clone(), c_prev: c.clone() });
            match mask {
                None => {
                    outs[t] = Some(h2.clone());
                    (h, c) = (h2, c2);
                }
                Some(m) => {
                    let m = m.try_select(0, t as isize)?;
                    let keep = |new: &Tensor<B>, old: &Tensor<B>| old.try_add(&m.try_mul(&new.try_sub(old)?)?);
                    outs[t] = Some(h2.try_mul(&m)?);
                    (h, c) = (keep(&h2, &h)?, keep(&c2, &c)?);
                }
            }
        }
        let mut flat: Vec<Tensor<B>> = outs.into_iter().map(|o| o.expect("every step ran").try_reshape(&[-1])).collect::<Result<_>>()?;
        flat.push(h.try_reshape(&[-1])?);
        flat.push(c.try_reshape(&[-1])?);
        let work: Vec<StepWork<B>> = work.into_iter().map(|w| w.expect("every step ran")).collect();
        Ok((Tensor::try_cat(&flat, 0)?, x2, work))
    })?;
    let all = inputs.all();
    let needs: Vec<bool> = all.iter().map(|t| t.requires_grad()).collect();
    debug_assert_eq!(packed.numel(), s.packed());
    Ok(Tensor::record(packed.inner.storage.clone(), packed.layout().clone(), packed.dtype(), "LstmLayerBackward0", &all, || {
        LstmLayerBackward {
            saved: all.iter().map(|t| SavedTensor::new(t)).collect(),
            needs,
            x2,
            work,
            mask: mask.cloned(),
            sizes: s,
            reverse,
        }
    }))
}

/// The backward of a fused layer.
struct LstmLayerBackward<B: Backend> {
    /// x, h0, c0, w_ih, w_hh, and the biases there are.
    saved: Vec<SavedTensor<B>>,
    needs: Vec<bool>,
    /// x as contiguous `[L N, input]` rows.
    x2: Tensor<B>,
    /// Per time step (in time order, whatever the direction).
    work: Vec<StepWork<B>>,
    mask: Option<Tensor<B>>,
    sizes: Sizes,
    reverse: bool,
}

impl<B: Backend> BackwardOp<B> for LstmLayerBackward<B> {
    fn backward(&self, ctx: &BackwardCtx<'_, B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let xs: Vec<Tensor<B>> = self.saved.iter().map(|t| t.get(ctx.name())).collect::<Result<_>>()?;
        if is_grad_enabled() {
            return self.differentiable(&xs, g);
        }
        let s = self.sizes;
        let (nh, lnh) = (s.batch * s.hidden, s.len * s.batch * s.hidden);
        let (w_ih, w_hh) = (&xs[3], &xs[4]);
        let state = Shape::from([s.batch, s.hidden]);
        let dout = g.try_narrow(0, 0, lnh)?.try_reshape_to(&Shape::from([s.len, s.batch, s.hidden]))?;
        let mut dh = g.try_narrow(0, lnh, nh)?.try_reshape_to(&state)?;
        let mut dc = g.try_narrow(0, lnh + nh, nh)?.try_reshape_to(&state)?;
        let mut dgates: Vec<Option<Tensor<B>>> = vec![None; s.len];
        for t in s.order(self.reverse).into_iter().rev() {
            let step = &self.work[t];
            let dout_t = dout.try_select(0, t as isize)?;
            // the state's gradient into this step's cell, and what passes around it past a sequence's end
            let (dh2, dc2, around) = match &self.mask {
                None => (dh.try_add(&dout_t)?, dc.clone(), None),
                Some(m) => {
                    let m = m.try_select(0, t as isize)?;
                    let (dh_m, dc_m) = (dh.try_mul(&m)?, dc.try_mul(&m)?);
                    (dh_m.try_add(&dout_t.try_mul(&m)?)?, dc_m.clone(), Some((dh.try_sub(&dh_m)?, dc.try_sub(&dc_m)?)))
                }
            };
            let ins: Vec<&Tensor<B>> = [&dh2, &dc2].into_iter().chain(&step.acts).chain([&step.c_prev]).collect();
            let mut res = program::run(cell_backward(), &ins)?;
            let dc_prev = res.pop().expect("dc");
            let dg = Tensor::try_cat(&res, 1)?;
            dh = dg.try_matmul(w_hh)?;
            dc = dc_prev;
            if let Some((dh_around, dc_around)) = around {
                dh = dh.try_add(&dh_around)?;
                dc = dc.try_add(&dc_around)?;
            }
            dgates[t] = Some(dg);
        }
        // [L N, 4 H], time order
        let dg_all = if s.len == 0 {
            Tensor::try_zeros_dtype([0, 4 * s.hidden], g.dtype())?
        } else {
            Tensor::try_cat(&dgates.into_iter().map(|d| d.expect("every step ran")).collect::<Vec<_>>(), 0)?
        };
        let n = &self.needs;
        let mut grads: Vec<Option<Tensor<B>>> = vec![None; xs.len()];
        if n[0] {
            grads[0] = Some(dg_all.try_matmul(w_ih)?.try_reshape_to(xs[0].shape())?);
        }
        grads[1] = n[1].then_some(dh);
        grads[2] = n[2].then_some(dc);
        if n[3] {
            grads[3] = Some(dg_all.try_t()?.try_matmul(&self.x2)?);
        }
        if n[4] {
            let h_prev: Vec<Tensor<B>> = self.work.iter().map(|w| w.h_prev.clone()).collect();
            let h_prev = if s.len == 0 { Tensor::try_zeros_dtype([0, s.hidden], g.dtype())? } else { Tensor::try_cat(&h_prev, 0)? };
            grads[4] = Some(dg_all.try_t()?.try_matmul(&h_prev)?);
        }
        if n[5..].iter().any(|&b| b) {
            let db = dg_all.try_sum_dims(&[0], false)?;
            for k in 5..xs.len() {
                grads[k] = n[k].then(|| db.clone());
            }
        }
        Ok(grads)
    }
}

impl<B: Backend> LstmLayerBackward<B> {
    /// Under `create_graph`: the composite recomputed from the saved inputs
    /// and differentiated with a graph, so the gradient can be
    /// differentiated again.
    fn differentiable(&self, xs: &[Tensor<B>], g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let w = RecurrentWeights { w_ih: &xs[3], w_hh: &xs[4], b_ih: xs.get(5), b_hh: xs.get(6) };
        // with a single bias saved, which one it was does not matter: both add to every step's gates
        let inputs = LayerInputs { x: &xs[0], h0: &xs[1], c0: &xs[2], w };
        let packed = composite_layer(&inputs, self.sizes, self.reverse, self.mask.as_ref())?;
        let wrt: Vec<Tensor<B>> = xs.iter().zip(&self.needs).filter(|(_, n)| **n).map(|(t, _)| t.clone()).collect();
        let options = GradOptions { retain_graph: true, create_graph: true, allow_unused: true };
        let mut got = autograd::grad(&[packed], &wrt, Some(std::slice::from_ref(g)), options)?.into_iter();
        Ok(self.needs.iter().map(|&n| if n { got.next().flatten() } else { None }).collect())
    }
}
