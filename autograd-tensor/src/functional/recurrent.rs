//! Recurrent cells and layers: PyTorch's `torch.lstm_cell` and
//! `torch.gru_cell`, and one direction of one LSTM or GRU layer over a whole
//! sequence as ONE graph node.
//!
//! Why a node per layer: run step by step, a layer records a dozen nodes
//! per step (two products, the gate activations, the state update), each
//! with its own temporaries, and its weight gradients are `L` small
//! products summed. As one node (PyTorch's CPU LSTM is one oneDNN
//! primitive; cuDNN's is one call) the input projection of every step is
//! one product, each step is one `addmm` and one fused elementwise program
//! ([`Backend::fused_elementwise`]: the gates and the state update without
//! temporaries), and backward is one fused program and one product per step,
//! then the weight and input gradients as products over the whole
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
    let g = xi.try_add(&try_linear(h, w_hh, b_hh)?)?.try_chunk(4, -1)?;
    let (i, f, gg, o) = (g[0].try_sigmoid()?, g[1].try_sigmoid()?, g[2].try_tanh()?, g[3].try_sigmoid()?);
    let c2 = f.try_mul(c)?.try_add(&i.try_mul(&gg)?)?;
    Ok((o.try_mul(&c2.try_tanh()?)?, c2))
}

/// PyTorch's `torch.gru_cell`: one GRU step from `h` on `x` (`[N, input]`),
/// gates in PyTorch's order (reset, update, new): `r = sigmoid(x_r + h_r)`,
/// `z = sigmoid(x_z + h_z)`, `n = tanh(x_n + r h_n)` (the hidden bias inside
/// the reset), `h' = (1 - z) n + z h`.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::zeros([2, 3]);
/// let h = Tensor::<RefBackend>::ones([2, 4]);
/// let (w_ih, w_hh) = (Tensor::<RefBackend>::zeros([12, 3]), Tensor::<RefBackend>::zeros([12, 4]));
/// // z = 1/2, n = tanh(0) = 0: h' = h / 2
/// assert_eq!(F::try_gru_cell(&x, &h, &w_ih, &w_hh, None, None).unwrap().to_vec::<f32>(), vec![0.5; 8]);
/// ```
#[track_caller]
pub fn try_gru_cell<B: Backend>(
    x: &Tensor<B>,
    h: &Tensor<B>,
    w_ih: &Tensor<B>,
    w_hh: &Tensor<B>,
    b_ih: Option<&Tensor<B>>,
    b_hh: Option<&Tensor<B>>,
) -> Result<Tensor<B>> {
    let xg = try_linear(x, w_ih, b_ih)?.try_chunk(3, -1)?;
    let hg = try_linear(h, w_hh, b_hh)?.try_chunk(3, -1)?;
    let r = xg[0].try_add(&hg[0])?.try_sigmoid()?;
    let z = xg[1].try_add(&hg[1])?.try_sigmoid()?;
    let n = xg[2].try_add(&r.try_mul(&hg[2])?)?.try_tanh()?;
    // (1 - z) n + z h
    n.try_add(&z.try_mul(&h.try_sub(&n)?)?)
}

/// The weights of one recurrent layer and direction, PyTorch's layouts:
/// `w_ih` `[gates H, input]`, `w_hh` `[gates H, H]`, biases `[gates H]`
/// (4 gates for an LSTM, 3 for a GRU, 1 for an RNN).
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
    let inputs = LayerInputs { cell: Cell::Lstm, x, h0, c0: Some(c0), w: *w };
    let mut parts = layer(&inputs, reverse, mask, Location::caller())?.into_iter();
    let (out, h, c) = (parts.next(), parts.next(), parts.next());
    Ok((out.expect("outputs"), h.expect("h_n"), c.expect("c_n")))
}

/// One direction of one GRU layer over a sequence, as [`try_lstm_layer`]
/// without a cell state: `x` `[L, N, input]` from `h0` (`[N, H]`), an
/// optional `mask`. Returns the outputs `[L, N, H]` and the final `h`.
/// Recorded as one node (`GruLayerBackward0`).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([5, 2, 3]);
/// let h0 = Tensor::<RefBackend>::zeros([2, 4]);
/// let (w_ih, w_hh) = (Tensor::<RefBackend>::full([12, 3], 0.1), Tensor::<RefBackend>::full([12, 4], -0.1));
/// let w = F::RecurrentWeights { w_ih: &w_ih, w_hh: &w_hh, b_ih: None, b_hh: None };
/// let (out, h) = F::try_gru_layer(&x, &h0, &w, true, None).unwrap();
/// // backwards in time: the first output is the final state
/// assert_eq!(out.try_select(0, 0).unwrap().to_vec::<f32>(), h.to_vec::<f32>());
/// ```
#[track_caller]
pub fn try_gru_layer<B: Backend>(
    x: &Tensor<B>,
    h0: &Tensor<B>,
    w: &RecurrentWeights<'_, B>,
    reverse: bool,
    mask: Option<&Tensor<B>>,
) -> Result<(Tensor<B>, Tensor<B>)> {
    let inputs = LayerInputs { cell: Cell::Gru, x, h0, c0: None, w: *w };
    let mut parts = layer(&inputs, reverse, mask, Location::caller())?.into_iter();
    let (out, h) = (parts.next(), parts.next());
    Ok((out.expect("outputs"), h.expect("h_n")))
}

/// The recurrences a fused layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
    fn op(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm",
            Cell::Gru => "gru",
        }
    }
    fn node(self) -> &'static str {
        match self {
            Cell::Lstm => "LstmLayerBackward0",
            Cell::Gru => "GruLayerBackward0",
        }
    }
    /// State tensors per step: `h` and `c`, or `h`.
    fn states(self) -> usize {
        if self == Cell::Lstm { 2 } else { 1 }
    }
}

/// Checks, then the fused node or the composite, returned as views: the
/// outputs, `h_n` and (LSTM) `c_n`.
fn layer<B: Backend>(
    inputs: &LayerInputs<'_, B>,
    reverse: bool,
    mask: Option<&Tensor<B>>,
    loc: &'static Location<'static>,
) -> Result<Vec<Tensor<B>>> {
    let sizes = check(inputs, mask).map_err(|e| e.at(loc))?;
    let all = inputs.all();
    let dtype = inputs.x.dtype();
    let fused = dtype.is_compute()
        && all.iter().all(|t| t.dtype() == dtype && t.tangent().is_none())
        && mask.is_none_or(|m| m.tangent().is_none())
        && !crate::autocast::is_autocast_enabled();
    let packed = if fused { fused_layer(inputs, sizes, reverse, mask)? } else { composite_layer(inputs, sizes, reverse, mask)? };
    unpack(&packed, inputs.cell, sizes)
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
    /// The time steps in the order they are taken.
    fn order(&self, reverse: bool) -> Vec<usize> {
        let len = self.len;
        (0..len).map(|k| if reverse { len - 1 - k } else { k }).collect()
    }
}

fn check<B: Backend>(inputs: &LayerInputs<'_, B>, mask: Option<&Tensor<B>>) -> Result<Sizes> {
    let (x, w, gates) = (inputs.x, &inputs.w, inputs.cell.gates());
    let bad = |msg: String| Error::invalid_shape(inputs.cell.op(), msg);
    if x.rank() != 3 {
        return Err(bad(format!("expected an input of shape (L, N, input), got {:?}", x.dims())));
    }
    let (len, batch, input) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    if w.w_hh.rank() != 2 || w.w_hh.dims()[1].checked_mul(gates) != Some(w.w_hh.dims()[0]) {
        return Err(bad(format!("w_hh must be [{gates} H, H], got {:?}", w.w_hh.dims())));
    }
    let hidden = w.w_hh.dims()[1];
    if w.w_ih.dims() != [gates * hidden, input] {
        return Err(bad(format!("w_ih must be [{gates} H, input] = [{}, {input}], got {:?}", gates * hidden, w.w_ih.dims())));
    }
    for (what, b) in [("b_ih", w.b_ih), ("b_hh", w.b_hh)] {
        if let Some(b) = b
            && b.dims() != [gates * hidden]
        {
            return Err(bad(format!("{what} must be [{gates} H] = [{}], got {:?}", gates * hidden, b.dims())));
        }
    }
    for (what, s) in [("h0", Some(inputs.h0)), ("c0", inputs.c0)] {
        if let Some(s) = s
            && s.dims() != [batch, hidden]
        {
            return Err(bad(format!("{what} must be [N, H] = [{batch}, {hidden}], got {:?}", s.dims())));
        }
    }
    if let Some(m) = mask
        && (m.dims() != [len, batch, 1] || m.dtype() != x.dtype())
    {
        return Err(bad(format!(
            "the mask must be [L, N, 1] = [{len}, {batch}, 1] of the input's dtype {:?}, got {:?} {:?}",
            x.dtype(),
            m.dims(),
            m.dtype()
        )));
    }
    // the largest buffer's size, checked once here (every other size is below it or below x's)
    len.checked_add(2)
        .and_then(|l| l.checked_mul(batch))
        .and_then(|e| e.checked_mul(hidden))
        .and_then(|e| e.checked_mul(gates))
        .ok_or_else(|| bad(format!("an output of {len} steps x {batch} x {hidden} overflows")))?;
    Ok(Sizes { len, batch, input, hidden })
}

/// The layer's differentiable inputs, in the node's input order.
struct LayerInputs<'a, B: Backend> {
    cell: Cell,
    x: &'a Tensor<B>,
    h0: &'a Tensor<B>,
    /// The LSTM's cell state.
    c0: Option<&'a Tensor<B>>,
    w: RecurrentWeights<'a, B>,
}

impl<B: Backend> LayerInputs<'_, B> {
    /// x, h0, (c0), w_ih, w_hh, and the biases there are.
    fn all(&self) -> Vec<&Tensor<B>> {
        [self.x, self.h0].into_iter().chain(self.c0).chain([self.w.w_ih, self.w.w_hh]).chain(self.w.b_ih).chain(self.w.b_hh).collect()
    }
}

/// The outputs `[L, N, H]`, then each final state `[N, H]`, as views of the packed result.
fn unpack<B: Backend>(packed: &Tensor<B>, cell: Cell, s: Sizes) -> Result<Vec<Tensor<B>>> {
    let (nh, lnh) = (s.batch * s.hidden, s.len * s.batch * s.hidden);
    let mut parts = vec![packed.try_narrow(0, 0, lnh)?.try_reshape_to(&Shape::from([s.len, s.batch, s.hidden]))?];
    for k in 0..cell.states() {
        parts.push(packed.try_narrow(0, lnh + k * nh, nh)?.try_reshape_to(&Shape::from([s.batch, s.hidden]))?);
    }
    Ok(parts)
}

/// Every output, then the final states, flattened into one tensor.
fn pack<B: Backend>(outs: Vec<Option<Tensor<B>>>, states: &[&Tensor<B>]) -> Result<Tensor<B>> {
    let mut flat: Vec<Tensor<B>> = outs.into_iter().map(|o| o.expect("every step ran").try_reshape(&[-1])).collect::<Result<_>>()?;
    for s in states {
        flat.push(s.try_reshape(&[-1])?);
    }
    Tensor::try_cat(&flat, 0)
}

/// The step's output into `outs[t]` and the state after step `t`: the
/// cell's new state, or past a sequence's end (`mask` 0) the state kept
/// and the output zero.
fn advance<B: Backend>(
    mask: Option<&Tensor<B>>,
    t: usize,
    outs: &mut [Option<Tensor<B>>],
    (h2, c2): (Tensor<B>, Option<Tensor<B>>),
    (h, c): (Tensor<B>, Option<Tensor<B>>),
) -> Result<(Tensor<B>, Option<Tensor<B>>)> {
    let Some(m) = mask else {
        outs[t] = Some(h2.clone());
        return Ok((h2, c2));
    };
    let m = m.try_select(0, t as isize)?;
    let keep = |new: &Tensor<B>, old: &Tensor<B>| old.try_add(&m.try_mul(&new.try_sub(old)?)?);
    outs[t] = Some(h2.try_mul(&m)?);
    let c = match (c2, &c) {
        (Some(c2), Some(c)) => Some(keep(&c2, c)?),
        _ => None,
    };
    Ok((keep(&h2, &h)?, c))
}

/// The packed result of the composite: step by step with differentiable ops.
fn composite_layer<B: Backend>(inputs: &LayerInputs<'_, B>, s: Sizes, reverse: bool, mask: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let w = &inputs.w;
    let (mut h, mut c) = (inputs.h0.clone(), inputs.c0.cloned());
    let mut outs: Vec<Option<Tensor<B>>> = vec![None; s.len];
    for t in s.order(reverse) {
        let x = inputs.x.try_select(0, t as isize)?;
        let (h2, c2) = match &c {
            Some(c) => {
                let (h2, c2) = try_lstm_cell(&x, &h, c, w.w_ih, w.w_hh, w.b_ih, w.b_hh)?;
                (h2, Some(c2))
            }
            None => (try_gru_cell(&x, &h, w.w_ih, w.w_hh, w.b_ih, w.b_hh)?, None),
        };
        (h, c) = advance(mask, t, &mut outs, (h2, c2), (h, c))?;
    }
    pack(outs, &[Some(&h), c.as_ref()].into_iter().flatten().collect::<Vec<_>>())
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

/// A GRU step, one pass: inputs the input's gate projections `x_r`,
/// `x_z`, `x_n` and the hidden state's `h_r`, `h_z`, `h_n` (views of two
/// `[N, 3 H]` products), and `h`; outputs `h'`, and for backward `r`, `z`, `n`.
fn gru_forward() -> &'static ElementwiseProgram {
    use BinaryOp::{Add, Mul, Sub};
    use Instr::{Binary, Unary};
    use UnaryOp::{Sigmoid, Tanh};
    program!(
        7,
        [
            Binary(Add, 0, 3),   // 7
            Unary(Sigmoid, 7),   // 8 r
            Binary(Add, 1, 4),   // 9
            Unary(Sigmoid, 9),   // 10 z
            Binary(Mul, 8, 5),   // 11 r h_n
            Binary(Add, 2, 11),  // 12
            Unary(Tanh, 12),     // 13 n
            Binary(Sub, 6, 13),  // 14 h - n
            Binary(Mul, 10, 14), // 15 z (h - n)
            Binary(Add, 13, 15), // 16 h' = n + z (h - n)
        ],
        vec![16, 8, 10, 13]
    )
}

/// A GRU step's backward, one pass: inputs `dh'`, `r`, `z`, `n`, `h_n`,
/// `h`; outputs the gradients of the pre-activations `r`, `z` and `n` (the
/// input's gate gradients), of `h_n` (`r` times the new gate's), and the
/// part of `dh` that passes straight through (`z dh'`).
fn gru_backward() -> &'static ElementwiseProgram {
    use BinaryOp::{Mul, Sub};
    use Instr::{Binary, Unary};
    use UnaryOp::Square;
    program!(
        6,
        [
            Binary(Mul, 0, 2),   // 6 z dh (to h)
            Binary(Sub, 0, 6),   // 7 dn = (1 - z) dh
            Binary(Sub, 5, 3),   // 8 h - n
            Binary(Mul, 0, 8),   // 9 dz
            Unary(Square, 3),    // 10 n^2
            Binary(Mul, 7, 10),  // 11
            Binary(Sub, 7, 11),  // 12 d pre-n
            Binary(Mul, 12, 1),  // 13 d h_n = r d pre-n
            Binary(Mul, 12, 4),  // 14 dr = h_n d pre-n
            Unary(Square, 1),    // 15 r^2
            Binary(Sub, 1, 15),  // 16 r (1 - r)
            Binary(Mul, 14, 16), // 17 d pre-r
            Unary(Square, 2),    // 18 z^2
            Binary(Sub, 2, 18),  // 19 z (1 - z)
            Binary(Mul, 9, 19),  // 20 d pre-z
        ],
        vec![17, 20, 12, 13, 6]
    )
}

/// What one step keeps for backward: the activations its backward
/// program reads, and the state it started from.
struct StepWork<T> {
    /// LSTM: `i`, `f`, `g`, `o`, `tanh(c')`, then `c`; GRU: `r`, `z`, `n`, `h_n`.
    acts: Vec<T>,
    h_prev: T,
}

impl<B: Backend> StepWork<Tensor<B>> {
    /// Saved through the saved-tensor hooks (a checkpointed region drops
    /// them and recomputes them in backward, as any node's saved tensors).
    fn save(&self) -> StepWork<SavedTensor<B>> {
        StepWork { acts: self.acts.iter().map(SavedTensor::new).collect(), h_prev: SavedTensor::new(&self.h_prev) }
    }
}

impl<B: Backend> StepWork<SavedTensor<B>> {
    fn get(&self, node: &'static str) -> Result<StepWork<Tensor<B>>> {
        Ok(StepWork { acts: self.acts.iter().map(|t| t.get(node)).collect::<Result<_>>()?, h_prev: self.h_prev.get(node)? })
    }
}

/// The fused forward: one product for every step's input projection, then
/// per step one product of the state and one fused program; recorded as one node.
fn fused_layer<B: Backend>(inputs: &LayerInputs<'_, B>, s: Sizes, reverse: bool, mask: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let (w, cell) = (&inputs.w, inputs.cell);
    let (rows, gh) = (s.len * s.batch, cell.gates() * s.hidden);
    let (packed, x2, work) = no_grad(|| -> Result<_> {
        let x2 = inputs.x.try_reshape_to(&Shape::from([rows, s.input]))?.try_contiguous()?;
        // an LSTM adds both biases before its gates; a GRU's hidden bias sits inside the reset
        let bias = match (cell, w.b_ih, w.b_hh) {
            (Cell::Lstm, Some(a), Some(b)) => Some(a.try_add(b)?),
            (Cell::Lstm, b, None) | (Cell::Lstm, None, b) => b.cloned(),
            (Cell::Gru, b, _) => b.cloned(),
        };
        // every step's x W_ih^T + bias: [L N, gates H]
        let proj = try_linear(&x2, w.w_ih, bias.as_ref())?.try_contiguous()?;
        let whh_t = w.w_hh.layout().transpose(0, 1)?;
        let (mut h, mut c) = (inputs.h0.clone(), inputs.c0.cloned());
        let mut outs: Vec<Option<Tensor<B>>> = vec![None; s.len];
        let mut work: Vec<Option<StepWork<Tensor<B>>>> = (0..s.len).map(|_| None).collect();
        let chunks =
            |t: &Tensor<B>| -> Result<Vec<Tensor<B>>> { (0..cell.gates()).map(|q| t.try_narrow(1, q * s.hidden, s.hidden)).collect() };
        for t in s.order(reverse) {
            let (h2, c2, acts) = match &c {
                Some(c) => {
                    // gates = proj[t] + h W_hh^T, in one addmm
                    let lp = proj.layout().slice(0, t * s.batch, s.batch, 1)?;
                    let gates = B::addmm(&proj.storage(), &lp, &h.storage(), h.layout(), &w.w_hh.storage(), &whh_t)?;
                    let g = chunks(&Tensor::from_storage(gates, Shape::from([s.batch, gh])))?;
                    let mut res = program::run(cell_forward(), &[&g[0], &g[1], &g[2], &g[3], c])?;
                    let rest = res.split_off(2);
                    let c2 = res.pop().expect("c'");
                    let mut acts = rest;
                    acts.push(c.clone());
                    (res.pop().expect("h'"), Some(c2), acts)
                }
                None => {
                    let hh = try_linear(&h, w.w_hh, w.b_hh)?;
                    let xg = chunks(&proj.try_narrow(0, t * s.batch, s.batch)?)?;
                    let hg = chunks(&hh)?;
                    let mut res = program::run(gru_forward(), &[&xg[0], &xg[1], &xg[2], &hg[0], &hg[1], &hg[2], &h])?;
                    let mut acts = res.split_off(1);
                    acts.push(hg[2].clone());
                    (res.pop().expect("h'"), None, acts)
                }
            };
            work[t] = Some(StepWork { acts, h_prev: h.clone() });
            (h, c) = advance(mask, t, &mut outs, (h2, c2), (h, c))?;
        }
        let work: Vec<StepWork<Tensor<B>>> = work.into_iter().map(|w| w.expect("every step ran")).collect();
        let packed = pack(outs, &[Some(&h), c.as_ref()].into_iter().flatten().collect::<Vec<_>>())?;
        Ok((packed, x2, work))
    })?;
    let all = inputs.all();
    let needs: Vec<bool> = all.iter().map(|t| t.requires_grad()).collect();
    let biases = (w.b_ih.is_some(), w.b_hh.is_some());
    Ok(Tensor::record(packed.inner.storage.clone(), packed.layout().clone(), packed.dtype(), cell.node(), &all, || LayerBackward {
        cell,
        saved: all.iter().map(|t| SavedTensor::new(t)).collect(),
        needs,
        biases,
        x2: SavedTensor::new(&x2),
        work: work.iter().map(StepWork::save).collect(),
        mask: mask.map(SavedTensor::new),
        sizes: s,
        reverse,
    }))
}

/// The backward of a fused layer.
struct LayerBackward<B: Backend> {
    cell: Cell,
    /// [`LayerInputs::all`].
    saved: Vec<SavedTensor<B>>,
    needs: Vec<bool>,
    /// Whether `b_ih` and `b_hh` were given.
    biases: (bool, bool),
    /// x as contiguous `[L N, input]` rows.
    x2: SavedTensor<B>,
    /// Per time step (in time order, whatever the direction).
    work: Vec<StepWork<SavedTensor<B>>>,
    /// Saved as the inputs are: modified in place before backward is an `Err`.
    mask: Option<SavedTensor<B>>,
    sizes: Sizes,
    reverse: bool,
}

/// `[L N, cols]` from per-step `[N, cols]` tensors in time order (`[0, cols]` for no step).
fn rows<B: Backend>(steps: Vec<Tensor<B>>, cols: usize, like: &Tensor<B>) -> Result<Tensor<B>> {
    if steps.is_empty() { Tensor::try_zeros_dtype([0, cols], like.dtype()) } else { Tensor::try_cat(&steps, 0) }
}

impl<B: Backend> BackwardOp<B> for LayerBackward<B> {
    fn backward(&self, ctx: &BackwardCtx<'_, B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let xs: Vec<Tensor<B>> = self.saved.iter().map(|t| t.get(ctx.name())).collect::<Result<_>>()?;
        if is_grad_enabled() {
            let mask = self.mask.as_ref().map(|m| m.get(ctx.name())).transpose()?;
            return self.differentiable(&xs, mask.as_ref(), g);
        }
        let (s, lstm) = (self.sizes, self.cell == Cell::Lstm);
        let work: Vec<StepWork<Tensor<B>>> = self.work.iter().map(|w| w.get(ctx.name())).collect::<Result<_>>()?;
        let mask = self.mask.as_ref().map(|m| m.get(ctx.name())).transpose()?;
        let (nh, lnh) = (s.batch * s.hidden, s.len * s.batch * s.hidden);
        // the weights' places among the inputs: after x, h0 (and c0)
        let wi = if lstm { 3 } else { 2 };
        let (w_ih, w_hh) = (&xs[wi], &xs[wi + 1]);
        let state = Shape::from([s.batch, s.hidden]);
        let dout = g.try_narrow(0, 0, lnh)?.try_reshape_to(&Shape::from([s.len, s.batch, s.hidden]))?;
        let mut dh = g.try_narrow(0, lnh, nh)?.try_reshape_to(&state)?;
        let mut dc = if lstm { Some(g.try_narrow(0, lnh + nh, nh)?.try_reshape_to(&state)?) } else { None };
        // per step: the gradients of the input's gate projections and (GRU) of the hidden state's
        let mut dgx: Vec<Option<Tensor<B>>> = vec![None; s.len];
        let mut dgh: Vec<Option<Tensor<B>>> = vec![None; s.len];
        for t in s.order(self.reverse).into_iter().rev() {
            let step = &work[t];
            let dout_t = dout.try_select(0, t as isize)?;
            // the state's gradient into this step's cell, and (past a
            // sequence's end, mask 0) what passes around it: (1 - m) d
            let m = mask.as_ref().map(|m| m.try_select(0, t as isize)).transpose()?;
            let (dh2, dc2, around) = match &m {
                None => (dh.try_add(&dout_t)?, dc.clone(), None),
                Some(m) => {
                    let (dh_in, dc_in) = (dh.try_mul(m)?, dc.as_ref().map(|d| d.try_mul(m)).transpose()?);
                    let dc_around = dc.as_ref().zip(dc_in.as_ref()).map(|(d, d_in)| d.try_sub(d_in)).transpose()?;
                    (dh_in.try_add(&dout_t.try_mul(m)?)?, dc_in, Some((dh.try_sub(&dh_in)?, dc_around)))
                }
            };
            let (dh_prev, dc_prev) = match &dc2 {
                Some(dc2) => {
                    let ins: Vec<&Tensor<B>> = [&dh2, dc2].into_iter().chain(&step.acts).collect();
                    let mut res = program::run(cell_backward(), &ins)?;
                    let dc_prev = res.pop().expect("dc");
                    let dg = Tensor::try_cat(&res, 1)?;
                    let dh_prev = dg.try_matmul(w_hh)?;
                    dgx[t] = Some(dg);
                    (dh_prev, Some(dc_prev))
                }
                None => {
                    let ins: Vec<&Tensor<B>> = [&dh2].into_iter().chain(&step.acts).chain([&step.h_prev]).collect();
                    let mut res = program::run(gru_backward(), &ins)?;
                    let straight = res.pop().expect("z dh");
                    let d_hn = res.pop().expect("d h_n");
                    let dx = Tensor::try_cat(&res, 1)?;
                    let dhg = Tensor::try_cat(&[res[0].clone(), res[1].clone(), d_hn], 1)?;
                    let dh_prev = dhg.try_matmul(w_hh)?.try_add(&straight)?;
                    dgx[t] = Some(dx);
                    dgh[t] = Some(dhg);
                    (dh_prev, None)
                }
            };
            (dh, dc) = match around {
                None => (dh_prev, dc_prev),
                Some((dh_around, dc_around)) => {
                    (dh_prev.try_add(&dh_around)?, dc_prev.zip(dc_around).map(|(p, a)| p.try_add(&a)).transpose()?)
                }
            };
        }
        let gh = self.cell.gates() * s.hidden;
        // [L N, gates H], time order
        let dgx = rows(dgx.into_iter().map(|d| d.expect("every step ran")).collect(), gh, g)?;
        let dgh = if lstm { dgx.clone() } else { rows(dgh.into_iter().map(|d| d.expect("every step ran")).collect(), gh, g)? };
        let n = &self.needs;
        let mut grads: Vec<Option<Tensor<B>>> = vec![None; xs.len()];
        if n[0] {
            grads[0] = Some(dgx.try_matmul(w_ih)?.try_reshape_to(xs[0].shape())?);
        }
        grads[1] = n[1].then_some(dh);
        if lstm {
            grads[2] = n[2].then(|| dc.expect("an LSTM's cell gradient"));
        }
        if n[wi] {
            grads[wi] = Some(dgx.try_t()?.try_matmul(&self.x2.get(ctx.name())?)?);
        }
        if n[wi + 1] {
            let h_prev = rows(work.iter().map(|w| w.h_prev.clone()).collect(), s.hidden, g)?;
            grads[wi + 1] = Some(dgh.try_t()?.try_matmul(&h_prev)?);
        }
        let mut k = wi + 2;
        for (given, d) in [(self.biases.0, &dgx), (self.biases.1, &dgh)] {
            if given {
                grads[k] = if n[k] { Some(d.try_sum_dims(&[0], false)?) } else { None };
                k += 1;
            }
        }
        Ok(grads)
    }
}

impl<B: Backend> LayerBackward<B> {
    /// Under `create_graph`: the composite recomputed from the saved inputs
    /// and differentiated with a graph, so the gradient can be
    /// differentiated again.
    fn differentiable(&self, xs: &[Tensor<B>], mask: Option<&Tensor<B>>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let lstm = self.cell == Cell::Lstm;
        let wi = if lstm { 3 } else { 2 };
        let mut biases = xs[wi + 2..].iter();
        let b_ih = if self.biases.0 { biases.next() } else { None };
        let b_hh = if self.biases.1 { biases.next() } else { None };
        let w = RecurrentWeights { w_ih: &xs[wi], w_hh: &xs[wi + 1], b_ih, b_hh };
        let inputs = LayerInputs { cell: self.cell, x: &xs[0], h0: &xs[1], c0: lstm.then(|| &xs[2]), w };
        let packed = composite_layer(&inputs, self.sizes, self.reverse, mask)?;
        let wrt: Vec<Tensor<B>> = xs.iter().zip(&self.needs).filter(|(_, n)| **n).map(|(t, _)| t.clone()).collect();
        let options = GradOptions { retain_graph: true, create_graph: true, allow_unused: true };
        let mut got = autograd::grad(&[packed], &wrt, Some(std::slice::from_ref(g)), options)?.into_iter();
        Ok(self.needs.iter().map(|&n| if n { got.next().flatten() } else { None }).collect())
    }
}
