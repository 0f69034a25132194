//! RNN, LSTM, GRU and their cells against PyTorch: each case of
//! `autograd-testkit/fixtures/recurrent/recurrent.safetensors` (made by
//! `make_fixtures.py` beside it, PyTorch 2.15) rebuilt with the same
//! configuration, PyTorch's state dict loaded strictly, outputs, final
//! states and every gradient compared (float64 at 1e-10, float32 at 1e-5),
//! on every backend; packed sequences through `lengths`.

use autograd_core::{Backend, DType};
use autograd_nn::{ModuleExt, RecurrentCell, RecurrentConfig, RecurrentKind, RecurrentState};
use autograd_tensor::Tensor;
use autograd_tensor::autograd::{gradcheck, gradgradcheck};

mod fixture_case;
use fixture_case::Case;

const FILE: &str = "recurrent/recurrent.safetensors";

/// Runs a sequence case: state from `in/h0`, `in/c0` when the case has
/// them, lengths from `in/lengths`; compares out, h_n (and c_n).
fn sequence<B: Backend>(name: &'static str, config: RecurrentConfig) {
    let c = Case::<B>::load(FILE, name);
    let mut m = config.init::<B>();
    c.load_into(&mut m);
    let x = c.input("x");
    let h0 = c.has("in/h0").then(|| c.input("h0"));
    let c0 = c.has("in/c0").then(|| c.input("c0"));
    let state = h0.clone().map(|h| RecurrentState { h, c: c0.clone() });
    let lengths: Option<Vec<usize>> =
        c.has("in/lengths").then(|| c.get("in/lengths").to_vec::<i64>().iter().map(|&l| l as usize).collect());
    let (out, s) = m.try_forward_with(&x, state.as_ref(), lengths.as_deref()).unwrap();
    let mut outs = vec![("out", &out), ("h_n", &s.h)];
    if let Some(cn) = &s.c {
        outs.push(("c_n", cn));
    }
    let mut inputs = vec![("x", &x)];
    inputs.extend(h0.as_ref().map(|h| ("h0", h)));
    inputs.extend(c0.as_ref().map(|c| ("c0", c)));
    c.check(&m, &outs, &inputs);
}

fn layers<B: Backend>() {
    let f = |c: RecurrentConfig| c.with_dtype(DType::F64);
    sequence::<B>("rnn_tanh", f(RecurrentConfig::rnn(4, 5)));
    sequence::<B>(
        "rnn_relu_2layer_batch_first",
        f(RecurrentConfig::new(RecurrentKind::RnnRelu, 3, 4).with_num_layers(2).with_batch_first(true)),
    );
    sequence::<B>("lstm_2layer_bidirectional", f(RecurrentConfig::lstm(4, 5).with_num_layers(2).with_bidirectional(true)));
    sequence::<B>("lstm_batch_first_nobias", f(RecurrentConfig::lstm(3, 4).with_batch_first(true).with_bias(false)));
    sequence::<B>("lstm_unbatched", f(RecurrentConfig::lstm(3, 4)));
    sequence::<B>("gru_bidirectional_batch_first", f(RecurrentConfig::gru(3, 4).with_bidirectional(true).with_batch_first(true)));
    sequence::<B>("gru_2layer", f(RecurrentConfig::gru(4, 3).with_num_layers(2)));
    sequence::<B>("lstm_f32", RecurrentConfig::lstm(8, 16).with_num_layers(2));
}

fn packed_sequences<B: Backend>() {
    let f = |c: RecurrentConfig| c.with_dtype(DType::F64);
    sequence::<B>("lstm_packed_bidirectional", f(RecurrentConfig::lstm(3, 4).with_bidirectional(true)));
    sequence::<B>("gru_packed_2layer_batch_first", f(RecurrentConfig::gru(3, 4).with_num_layers(2).with_batch_first(true)));
    sequence::<B>("rnn_packed", f(RecurrentConfig::rnn(3, 4)));
}

fn cells<B: Backend>() {
    for (name, kind) in [("lstm_cell", RecurrentKind::Lstm), ("gru_cell", RecurrentKind::Gru), ("rnn_cell_relu", RecurrentKind::RnnRelu)] {
        let c = Case::<B>::load(FILE, name);
        let mut m = RecurrentCell::<B>::try_new(kind, 3, 4, true, DType::F64).unwrap();
        c.load_into(&mut m);
        let (x, h0) = (c.input("x"), c.input("h0"));
        let c0 = c.has("in/c0").then(|| c.input("c0"));
        let (h, cn) = m.try_step(&x, Some((&h0, c0.as_ref()))).unwrap();
        let mut outs = vec![("h", &h)];
        outs.extend(cn.as_ref().map(|t| ("c", t)));
        let mut inputs = vec![("x", &x), ("h0", &h0)];
        inputs.extend(c0.as_ref().map(|t| ("c0", t)));
        c.check(&m, &outs, &inputs);
    }
}

/// Backward through time against central differences (a bidirectional
/// 2-layer GRU with lengths), and the errors that name the layer.
fn gradients_and_errors<B: Backend>() {
    let m = RecurrentConfig::gru(2, 3).with_num_layers(2).with_bidirectional(true).with_dtype(DType::F64).init::<B>();
    let x = Tensor::<B>::from_vec((0..24).map(|i| (i as f64 * 0.41).sin()).collect::<Vec<_>>(), [4, 3, 2]).requires_grad_(true);
    let f = |v: &[Tensor<B>]| m.try_forward_with(&v[0], None, Some(&[4, 2, 3])).unwrap().0;
    gradcheck(f, std::slice::from_ref(&x), 1e-6, 1e-7, 1e-6).unwrap();
    // second order through time: an LSTM (with lengths) and an RNN cell
    let lstm2 = RecurrentConfig::lstm(2, 2).with_dtype(DType::F64).init::<B>();
    let x2 = x.narrow(0, 0, 3).narrow(1, 0, 2).detach().requires_grad_(true);
    let g = |v: &[Tensor<B>]| lstm2.try_forward_with(&v[0], None, Some(&[3, 2])).unwrap().0;
    gradgradcheck(g, &[x2], 1e-6, 1e-6, 1e-5).unwrap();
    let lstm = RecurrentConfig::lstm(3, 4).init::<B>();
    let e = lstm.try_forward_with(&Tensor::ones([5, 2, 7]), None, None).unwrap_err().to_string();
    assert!(e.contains("LSTM") && e.contains("[5, 2, 7]"), "{e}");
    let bad_state = RecurrentState { h: Tensor::ones([1, 2, 4]), c: None };
    assert!(lstm.try_forward_with(&Tensor::ones([5, 2, 3]), Some(&bad_state), None).is_err());
    assert!(lstm.try_forward_with(&Tensor::ones([5, 2, 3]), None, Some(&[6, 1])).is_err());
    assert!(RecurrentConfig::lstm(3, 4).with_dropout(1.5).try_init::<B>().is_err());
    // dropout between layers is off in eval mode: two runs agree
    let d = RecurrentConfig::lstm(3, 4).with_num_layers(2).with_dropout(0.5).init::<B>();
    d.eval();
    let x = Tensor::<B>::ones([3, 2, 3]);
    assert_eq!(d.forward_seq(&x).to_vec::<f32>(), d.forward_seq(&x).to_vec::<f32>());
}

trait ForwardSeq<B: Backend> {
    fn forward_seq(&self, x: &Tensor<B>) -> Tensor<B>;
}

impl<B: Backend> ForwardSeq<B> for autograd_nn::Recurrent<B> {
    fn forward_seq(&self, x: &Tensor<B>) -> Tensor<B> {
        autograd_nn::Module::forward(self, x)
    }
}

autograd_testkit::for_backends!(with_traced: layers, packed_sequences, cells, gradients_and_errors);
