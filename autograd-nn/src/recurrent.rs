//! Recurrent layers: `RNN` (tanh or ReLU), `LSTM`, `GRU` and their cells,
//! with PyTorch's arguments, parameter names (`weight_ih_l0`,
//! `bias_hh_l1_reverse`, ...), gate orders (LSTM: input, forget, cell,
//! output; GRU: reset, update, new), initialisation and returns.
//!
//! An LSTM or GRU layer runs each direction as one graph node
//! ([`F::try_lstm_layer`], [`F::try_gru_layer`]: one product projects every
//! step's input, one fused program per step, backward through time in the
//! node). RNN layers run the recurrence step by step with tensor ops, so
//! backward through time, double backward and forward mode come from the ops.
//! Sequences of different lengths: `lengths` masks as PyTorch's
//! `pack_padded_sequence` does (outputs past a sequence's end are zeros,
//! and its final state is the state at its last step).

use crate::training::TrainingFlag;
use crate::{Module, ModuleFields, Parameter, init};
use autograd_core::{Backend, DType, Error, Result, ResultExt};
use autograd_tensor::Tensor;
use autograd_tensor::functional as F;
use std::panic::Location;

/// Which recurrence a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecurrentKind {
    /// `h' = tanh(W_ih x + b_ih + W_hh h + b_hh)` (PyTorch's `nn.RNN`).
    RnnTanh,
    /// The same with ReLU (`nonlinearity="relu"`).
    RnnRelu,
    /// Long short-term memory (`nn.LSTM`): gates input, forget, cell, output.
    Lstm,
    /// Gated recurrent unit (`nn.GRU`): gates reset, update, new.
    Gru,
}

impl RecurrentKind {
    /// Rows of the weights per hidden unit (one per gate).
    fn gates(self) -> usize {
        match self {
            RecurrentKind::RnnTanh | RecurrentKind::RnnRelu => 1,
            RecurrentKind::Lstm => 4,
            RecurrentKind::Gru => 3,
        }
    }
    fn name(self) -> &'static str {
        match self {
            RecurrentKind::RnnTanh | RecurrentKind::RnnRelu => "RNN",
            RecurrentKind::Lstm => "LSTM",
            RecurrentKind::Gru => "GRU",
        }
    }
}

/// A recurrent layer's state: the hidden state `h` and, for an LSTM, the
/// cell state `c`; `(num_layers * directions, N, hidden_size)` each (no
/// batch dim for an unbatched input).
#[derive(Clone, Debug)]
pub struct RecurrentState<B: Backend> {
    /// The hidden state (PyTorch's `h_n`, or `h_0` given).
    pub h: Tensor<B>,
    /// The cell state of an LSTM (`c_n`, or `c_0` given).
    pub c: Option<Tensor<B>>,
}

/// One step of a recurrence on the input `x` (`[N, input]`): the new
/// hidden and cell states.
fn step<B: Backend>(
    kind: RecurrentKind,
    x: &Tensor<B>,
    h: &Tensor<B>,
    c: Option<&Tensor<B>>,
    w: &F::RecurrentWeights<'_, B>,
) -> Result<(Tensor<B>, Option<Tensor<B>>)> {
    if kind == RecurrentKind::Lstm {
        let c = c.ok_or_else(|| Error::msg("LSTM step without a cell state"))?;
        let (h2, c2) = F::try_lstm_cell(x, h, c, w.w_ih, w.w_hh, w.b_ih, w.b_hh)?;
        return Ok((h2, Some(c2)));
    }
    match kind {
        RecurrentKind::Gru => Ok((F::try_gru_cell(x, h, w.w_ih, w.w_hh, w.b_ih, w.b_hh)?, None)),
        _ => {
            let pre = F::try_linear(x, w.w_ih, w.b_ih)?.try_add(&F::try_linear(h, w.w_hh, w.b_hh)?)?;
            Ok((if kind == RecurrentKind::RnnRelu { pre.try_relu()? } else { pre.try_tanh()? }, None))
        }
    }
}

/// The output sequence of the last layer, and the final hidden (and, for
/// an LSTM, cell) state of every layer and direction.
type Layers<B> = (Tensor<B>, Vec<Tensor<B>>, Vec<Tensor<B>>);

/// PyTorch's `nn.RNN`, `nn.LSTM` and `nn.GRU`: one type, the recurrence
/// chosen by [`RecurrentKind`]. Parameters carry PyTorch's names, so a
/// PyTorch state dict loads strictly.
///
/// ```
/// use autograd_nn::{LSTM, RecurrentConfig, ModuleExt};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let lstm: LSTM<RefBackend> = RecurrentConfig::lstm(8, 16).with_num_layers(2).with_bidirectional(true).with_batch_first(true).init();
/// let names: Vec<String> = lstm.named_parameters().into_iter().map(|(n, _)| n).take(5).collect();
/// assert_eq!(names, ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse"]);
/// let (out, state) = lstm.try_forward_with(&Tensor::ones([3, 5, 8]), None, None).unwrap();
/// assert_eq!(out.dims(), &[3, 5, 32]); // batch first, both directions
/// assert_eq!(state.h.dims(), &[4, 3, 16]);
/// assert_eq!(state.c.unwrap().dims(), &[4, 3, 16]);
/// ```
pub struct Recurrent<B: Backend> {
    /// The recurrence.
    pub kind: RecurrentKind,
    /// Features of the input.
    pub input_size: usize,
    /// Features of the hidden state.
    pub hidden_size: usize,
    /// Stacked layers.
    pub num_layers: usize,
    /// Whether the layers learn biases.
    pub bias: bool,
    /// Inputs and outputs are `(N, L, features)` instead of `(L, N, features)`.
    pub batch_first: bool,
    /// Dropout on each layer's output but the last, in training.
    pub dropout: f64,
    /// A second, reversed direction per layer.
    pub bidirectional: bool,
    params: Vec<(String, Parameter<B>)>,
    training: TrainingFlag,
}

/// PyTorch's `nn.RNN`.
pub type RNN<B> = Recurrent<B>;
/// PyTorch's `nn.LSTM`.
pub type LSTM<B> = Recurrent<B>;
/// PyTorch's `nn.GRU`.
pub type GRU<B> = Recurrent<B>;

/// Configuration of a [`Recurrent`] layer: the kind and sizes in the
/// constructor, PyTorch's defaults for the rest (one layer, a bias, `(L, N,
/// features)`, no dropout, one direction, float32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecurrentConfig {
    /// The recurrence.
    pub kind: RecurrentKind,
    /// Features of the input.
    pub input_size: usize,
    /// Features of the hidden state.
    pub hidden_size: usize,
    /// Stacked layers.
    pub num_layers: usize,
    /// Whether the layers learn biases.
    pub bias: bool,
    /// `(N, L, features)` inputs and outputs.
    pub batch_first: bool,
    /// Dropout between layers.
    pub dropout: f64,
    /// Both directions.
    pub bidirectional: bool,
    /// The parameters' dtype.
    pub dtype: DType,
}

impl RecurrentConfig {
    /// A layer of `kind` with PyTorch's defaults.
    pub fn new(kind: RecurrentKind, input_size: usize, hidden_size: usize) -> Self {
        RecurrentConfig {
            kind,
            input_size,
            hidden_size,
            num_layers: 1,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
            dtype: DType::F32,
        }
    }
    /// `nn.RNN(input_size, hidden_size)` (tanh).
    pub fn rnn(input_size: usize, hidden_size: usize) -> Self {
        Self::new(RecurrentKind::RnnTanh, input_size, hidden_size)
    }
    /// `nn.LSTM(input_size, hidden_size)`.
    pub fn lstm(input_size: usize, hidden_size: usize) -> Self {
        Self::new(RecurrentKind::Lstm, input_size, hidden_size)
    }
    /// `nn.GRU(input_size, hidden_size)`.
    pub fn gru(input_size: usize, hidden_size: usize) -> Self {
        Self::new(RecurrentKind::Gru, input_size, hidden_size)
    }
    /// With `num_layers` stacked layers.
    pub fn with_num_layers(self, num_layers: usize) -> Self {
        RecurrentConfig { num_layers, ..self }
    }
    /// With or without biases.
    pub fn with_bias(self, bias: bool) -> Self {
        RecurrentConfig { bias, ..self }
    }
    /// With `(N, L, features)` inputs and outputs.
    pub fn with_batch_first(self, batch_first: bool) -> Self {
        RecurrentConfig { batch_first, ..self }
    }
    /// With dropout `p` on each layer's output but the last.
    pub fn with_dropout(self, dropout: f64) -> Self {
        RecurrentConfig { dropout, ..self }
    }
    /// With both directions.
    pub fn with_bidirectional(self, bidirectional: bool) -> Self {
        RecurrentConfig { bidirectional, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        RecurrentConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`RecurrentConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Recurrent<B> {
        self.try_init().or_panic()
    }
    /// Builds the layer with PyTorch's initialisation: every weight and
    /// bias `U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))`. `Err` for zero
    /// layers or hidden size, or a dropout outside `[0, 1]`.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Recurrent<B>> {
        let loc = Location::caller();
        let c = *self;
        let bad = |msg: String| Error::InvalidShape { op: c.kind.name(), msg, location: Some(loc) };
        if c.num_layers == 0 || c.hidden_size == 0 {
            return Err(bad(format!("num_layers ({}) and hidden_size ({}) must be positive", c.num_layers, c.hidden_size)));
        }
        if !(0.0..=1.0).contains(&c.dropout) {
            return Err(bad(format!("dropout should be a number in range [0, 1] (got {})", c.dropout)));
        }
        let bound = 1.0 / (c.hidden_size as f64).sqrt();
        let (g, h) = (c.kind.gates(), c.hidden_size);
        let dirs = if c.bidirectional { 2 } else { 1 };
        let mut params = Vec::new();
        let u = |shape: Vec<usize>| -> Result<Parameter<B>> { Ok(Parameter::new(init::try_uniform::<B>(shape, -bound, bound, c.dtype)?)) };
        for layer in 0..c.num_layers {
            let input = if layer == 0 { c.input_size } else { h * dirs };
            for d in 0..dirs {
                let sfx = format!("l{layer}{}", if d == 1 { "_reverse" } else { "" });
                params.push((format!("weight_ih_{sfx}"), u(vec![g * h, input])?));
                params.push((format!("weight_hh_{sfx}"), u(vec![g * h, h])?));
                if c.bias {
                    params.push((format!("bias_ih_{sfx}"), u(vec![g * h])?));
                    params.push((format!("bias_hh_{sfx}"), u(vec![g * h])?));
                }
            }
        }
        Ok(Recurrent {
            kind: c.kind,
            input_size: c.input_size,
            hidden_size: c.hidden_size,
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            params,
            training: TrainingFlag::default(),
        })
    }
}

impl<B: Backend> Recurrent<B> {
    fn weights(&self, layer: usize, reverse: bool) -> F::RecurrentWeights<'_, B> {
        let per = if self.bias { 4 } else { 2 };
        let base = (layer * if self.bidirectional { 2 } else { 1 } + reverse as usize) * per;
        let p = |i: usize| self.params[base + i].1.tensor();
        F::RecurrentWeights { w_ih: p(0), w_hh: p(1), b_ih: self.bias.then(|| p(2)), b_hh: self.bias.then(|| p(3)) }
    }

    /// Runs the layer on `x` (`(L, N, input_size)`, `(N, L, input_size)`
    /// when `batch_first`, or unbatched `(L, input_size)`) from `state`
    /// (zeros when `None`), with sequences of `lengths` (each at most `L`;
    /// `None`: all of length `L`). Returns the output (`(L, N, directions *
    /// hidden_size)`, batch first as the input) and the final state,
    /// PyTorch's `(output, h_n)` or `(output, (h_n, c_n))`.
    #[track_caller]
    pub fn try_forward_with(
        &self,
        x: &Tensor<B>,
        state: Option<&RecurrentState<B>>,
        lengths: Option<&[usize]>,
    ) -> Result<(Tensor<B>, RecurrentState<B>)> {
        let loc = Location::caller();
        let op = self.kind.name();
        let bad = |msg: String| Error::InvalidShape { op, msg, location: Some(loc) };
        let unbatched = x.rank() == 2;
        if !(x.rank() == 3 || unbatched) || x.dims()[x.rank() - 1] != self.input_size {
            return Err(bad(format!(
                "expected an input of shape (L, N, {0}), (N, L, {0}) with batch_first, or unbatched (L, {0}); got {1:?}",
                self.input_size,
                x.dims()
            )));
        }
        // to (L, N, features)
        let x = if unbatched {
            x.try_unsqueeze(1)?
        } else if self.batch_first {
            x.try_transpose(0, 1)?
        } else {
            x.clone()
        };
        let (len, n) = (x.dims()[0], x.dims()[1]);
        let dirs = if self.bidirectional { 2 } else { 1 };
        let h = self.hidden_size;
        let state_dims = [self.num_layers * dirs, n, h];
        let check_state = |t: &Tensor<B>, what: &str| -> Result<Tensor<B>> {
            let t = if unbatched { t.try_unsqueeze(1)? } else { t.clone() };
            if t.dims() != state_dims {
                return Err(bad(format!("expected {what} of shape {:?}, got {:?}", state_dims, t.dims())));
            }
            Ok(t)
        };
        let lstm = self.kind == RecurrentKind::Lstm;
        let (h0, c0) = match state {
            Some(s) => {
                let c = match (&s.c, lstm) {
                    (Some(c), true) => Some(check_state(c, "c_0")?),
                    (None, true) => return Err(bad("an LSTM's state needs the cell state c_0".into())),
                    (_, false) => None,
                };
                (check_state(&s.h, "h_0")?, c)
            }
            None => {
                let z = Tensor::<B>::try_zeros_dtype(state_dims, x.dtype())?;
                (z.clone(), lstm.then_some(z))
            }
        };
        // the mask of live steps per (t, n), as PyTorch's packed sequences
        let mask = match lengths {
            None => None,
            Some(l) => {
                if l.len() != n || l.iter().any(|&k| k > len) {
                    return Err(bad(format!("lengths {l:?} must have one entry per sequence ({n}), each at most {len}")));
                }
                let m: Vec<f64> = (0..len).flat_map(|t| l.iter().map(move |&k| if t < k { 1.0 } else { 0.0 })).collect();
                Some(Tensor::<B>::try_from_vec(m, [len, n, 1])?.try_to_dtype(x.dtype())?)
            }
        };
        let training = self.training.get(op);
        let (input, hs, cs) = match self.kind {
            RecurrentKind::Lstm | RecurrentKind::Gru => self.run_fused(&x, &h0, c0.as_ref(), mask.as_ref(), training)?,
            _ => self.run_steps(&x, &h0, mask.as_ref(), training)?,
        };
        let h_n = Tensor::try_stack(&hs, 0)?;
        let c_n = if lstm { Some(Tensor::try_stack(&cs, 0)?) } else { None };
        let (out, h_n, c_n) = if unbatched {
            (input.try_squeeze_dim(1)?, h_n.try_squeeze_dim(1)?, c_n.map(|c| c.try_squeeze_dim(1)).transpose()?)
        } else if self.batch_first {
            (input.try_transpose(0, 1)?, h_n, c_n)
        } else {
            (input, h_n, c_n)
        };
        Ok((out, RecurrentState { h: h_n, c: c_n }))
    }

    /// Every layer of an LSTM or GRU, each direction one node
    /// ([`F::try_lstm_layer`], [`F::try_gru_layer`]): the output `(L, N,
    /// directions * H)` and the final states per layer and direction.
    fn run_fused(
        &self,
        x: &Tensor<B>,
        h0: &Tensor<B>,
        c0: Option<&Tensor<B>>,
        mask: Option<&Tensor<B>>,
        training: bool,
    ) -> Result<Layers<B>> {
        let dirs = if self.bidirectional { 2 } else { 1 };
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        let mut input = x.clone();
        for layer in 0..self.num_layers {
            let mut outs = Vec::with_capacity(dirs);
            for d in 0..dirs {
                let idx = (layer * dirs + d) as isize;
                let (w, h) = (self.weights(layer, d == 1), h0.try_select(0, idx)?);
                let out = match c0 {
                    Some(c0) => {
                        let (out, h, c) = F::try_lstm_layer(&input, &h, &c0.try_select(0, idx)?, &w, d == 1, mask)?;
                        cs.push(c);
                        hs.push(h);
                        out
                    }
                    None => {
                        let (out, h) = F::try_gru_layer(&input, &h, &w, d == 1, mask)?;
                        hs.push(h);
                        out
                    }
                };
                outs.push(out);
            }
            input = if dirs == 1 { outs.pop().expect("one direction") } else { Tensor::try_cat(&outs, -1)? };
            if layer + 1 < self.num_layers && self.dropout > 0.0 {
                input = F::try_dropout(&input, self.dropout, training)?;
            }
        }
        Ok((input, hs, cs))
    }

    /// Every layer of an RNN, step by step with tensor ops: the
    /// output `(L, N, directions * H)` and the final states.
    fn run_steps(&self, x: &Tensor<B>, h0: &Tensor<B>, mask: Option<&Tensor<B>>, training: bool) -> Result<Layers<B>> {
        let (len, n) = (x.dims()[0], x.dims()[1]);
        let dirs = if self.bidirectional { 2 } else { 1 };
        // The sequence as one tensor per step: each layer reads and writes
        // lists, so backward never scatters a step's gradient into a
        // zero-filled copy of the whole sequence (which made a step's cost
        // grow with the sequence's length).
        let mut input: Vec<Tensor<B>> = (0..len).map(|t| x.try_select(0, t as isize)).collect::<Result<_>>()?;
        let masks: Option<Vec<Tensor<B>>> = mask.map(|m| (0..len).map(|t| m.try_select(0, t as isize)).collect()).transpose()?;
        let mut hs = Vec::new();
        for layer in 0..self.num_layers {
            let mut outs = Vec::with_capacity(dirs);
            for d in 0..dirs {
                let w = self.weights(layer, d == 1);
                let h = h0.try_select(0, (layer * dirs + d) as isize)?;
                let (out, last) = self.run_direction(&input, &w, h, d == 1, masks.as_deref())?;
                outs.push(out);
                hs.push(last);
            }
            input = if dirs == 1 {
                outs.pop().expect("one direction")
            } else {
                (0..len).map(|t| Tensor::try_cat(&[outs[0][t].clone(), outs[1][t].clone()], -1)).collect::<Result<_>>()?
            };
            if layer + 1 < self.num_layers && self.dropout > 0.0 {
                input = input.iter().map(|t| F::try_dropout(t, self.dropout, training)).collect::<Result<_>>()?;
            }
        }
        let out = if input.is_empty() {
            Tensor::try_zeros_dtype([0, n, dirs * self.hidden_size], x.dtype())?
        } else {
            Tensor::try_stack(&input, 0)?
        };
        Ok((out, hs, Vec::new()))
    }

    /// One direction of one RNN layer over the sequence given step
    /// by step (`[N, in]` each): the outputs step by step and the final
    /// hidden state.
    fn run_direction(
        &self,
        xs: &[Tensor<B>],
        w: &F::RecurrentWeights<'_, B>,
        mut h: Tensor<B>,
        reverse: bool,
        masks: Option<&[Tensor<B>]>,
    ) -> Result<(Vec<Tensor<B>>, Tensor<B>)> {
        let len = xs.len();
        let mut outs: Vec<Tensor<B>> = Vec::with_capacity(len);
        let order: Vec<usize> = if reverse { (0..len).rev().collect() } else { (0..len).collect() };
        for t in order {
            let (h2, _) = step(self.kind, &xs[t], &h, None, w)?;
            match masks {
                None => {
                    outs.push(h2.clone());
                    h = h2;
                }
                Some(m) => {
                    // past a sequence's end: the state is kept and the output is zero
                    let m = &m[t];
                    outs.push(h2.try_mul(m)?);
                    h = h.try_add(&m.try_mul(&h2.try_sub(&h)?)?)?;
                }
            }
        }
        if reverse {
            outs.reverse();
        }
        Ok((outs, h))
    }
}

impl<B: Backend> ModuleFields<B> for Recurrent<B> {
    fn params(&self) -> Vec<(String, &Parameter<B>)> {
        self.params.iter().map(|(n, p)| (n.clone(), p)).collect()
    }
    fn params_mut(&mut self) -> Vec<(String, &mut Parameter<B>)> {
        self.params.iter_mut().map(|(n, p)| (n.clone(), p)).collect()
    }
    fn type_name(&self) -> &'static str {
        self.kind.name()
    }
}

impl<B: Backend> Module<B> for Recurrent<B> {
    /// The output sequence from a zero state (the final state: [`Recurrent::try_forward_with`]).
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        Ok(self.try_forward_with(x, None, None)?.0)
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}

/// PyTorch's `nn.RNNCell`, `nn.LSTMCell` and `nn.GRUCell`: one step of the
/// recurrence; parameters `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`.
///
/// ```
/// use autograd_nn::{LSTMCell, RecurrentCell, RecurrentKind};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let cell: LSTMCell<RefBackend> = RecurrentCell::new(RecurrentKind::Lstm, 4, 6);
/// let (h, c) = cell.try_step(&Tensor::ones([2, 4]), None).unwrap();
/// assert_eq!((h.dims(), c.unwrap().dims()), (&[2, 6][..], &[2, 6][..]));
/// ```
#[derive(crate::Module)]
pub struct RecurrentCell<B: Backend> {
    /// `[gates * hidden, input]`.
    pub weight_ih: Parameter<B>,
    /// `[gates * hidden, hidden]`.
    pub weight_hh: Parameter<B>,
    /// `[gates * hidden]`, if any.
    pub bias_ih: Option<Parameter<B>>,
    /// `[gates * hidden]`, if any.
    pub bias_hh: Option<Parameter<B>>,
    /// The recurrence.
    #[module(skip)]
    pub kind: RecurrentKind,
}

/// PyTorch's `nn.RNNCell`.
pub type RNNCell<B> = RecurrentCell<B>;
/// PyTorch's `nn.LSTMCell`.
pub type LSTMCell<B> = RecurrentCell<B>;
/// PyTorch's `nn.GRUCell`.
pub type GRUCell<B> = RecurrentCell<B>;

impl<B: Backend> RecurrentCell<B> {
    /// A cell with a bias, float32, PyTorch's initialisation (panics where
    /// [`RecurrentCell::try_new`] is an `Err`).
    #[track_caller]
    pub fn new(kind: RecurrentKind, input_size: usize, hidden_size: usize) -> Self {
        Self::try_new(kind, input_size, hidden_size, true, DType::F32).or_panic()
    }
    /// A cell: every weight and bias `U(-1/sqrt(hidden), 1/sqrt(hidden))`.
    #[track_caller]
    pub fn try_new(kind: RecurrentKind, input_size: usize, hidden_size: usize, bias: bool, dtype: DType) -> Result<Self> {
        if hidden_size == 0 {
            return Err(Error::InvalidShape {
                op: kind.name(),
                msg: "hidden_size must be positive".into(),
                location: Some(Location::caller()),
            });
        }
        let bound = 1.0 / (hidden_size as f64).sqrt();
        let g = kind.gates() * hidden_size;
        let u = |shape: Vec<usize>| -> Result<Parameter<B>> { Ok(Parameter::new(init::try_uniform::<B>(shape, -bound, bound, dtype)?)) };
        Ok(RecurrentCell {
            weight_ih: u(vec![g, input_size])?,
            weight_hh: u(vec![g, hidden_size])?,
            bias_ih: if bias { Some(u(vec![g])?) } else { None },
            bias_hh: if bias { Some(u(vec![g])?) } else { None },
            kind,
        })
    }

    /// One step from `state` (`(h, c)` for an LSTM, `(h, None)` otherwise;
    /// zeros when `None`) on `x` (`(N, input)` or unbatched `(input)`):
    /// the new `(h, c)`.
    #[track_caller]
    pub fn try_step(&self, x: &Tensor<B>, state: Option<(&Tensor<B>, Option<&Tensor<B>>)>) -> Result<(Tensor<B>, Option<Tensor<B>>)> {
        let loc = Location::caller();
        let hidden = self.weight_hh.tensor().dims()[1];
        let input = self.weight_ih.tensor().dims()[1];
        let unbatched = x.rank() == 1;
        if !(x.rank() == 2 || unbatched) || x.dims()[x.rank() - 1] != input {
            return Err(Error::InvalidShape {
                op: self.kind.name(),
                msg: format!("expected an input of shape (N, {input}) or ({input}), got {:?}", x.dims()),
                location: Some(loc),
            });
        }
        let x = if unbatched { x.try_unsqueeze(0)? } else { x.clone() };
        let n = x.dims()[0];
        let lift = |t: &Tensor<B>| if unbatched { t.try_unsqueeze(0) } else { Ok(t.clone()) };
        let zeros = || Tensor::<B>::try_zeros_dtype([n, hidden], x.dtype());
        let (h, c) = match state {
            Some((h, c)) => (lift(h)?, c.map(lift).transpose()?),
            None => (zeros()?, None),
        };
        let c = match (self.kind, c) {
            (RecurrentKind::Lstm, None) => Some(zeros()?),
            (_, c) => c,
        };
        let w = F::RecurrentWeights {
            w_ih: self.weight_ih.tensor(),
            w_hh: self.weight_hh.tensor(),
            b_ih: self.bias_ih.as_deref(),
            b_hh: self.bias_hh.as_deref(),
        };
        let (h2, c2) = step(self.kind, &x, &h, c.as_ref(), &w)?;
        if unbatched { Ok((h2.try_squeeze_dim(0)?, c2.map(|c| c.try_squeeze_dim(0)).transpose()?)) } else { Ok((h2, c2)) }
    }
}

impl<B: Backend> Module<B> for RecurrentCell<B> {
    /// The new hidden state from a zero state.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        Ok(self.try_step(x, None)?.0)
    }
}
