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
use autograd_tensor::functional as F;

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

/// The fused LSTM layer ([`F::try_lstm_layer`], one node per direction)
/// against the composite (steps of [`F::try_lstm_cell`] on the same
/// weights): outputs, final states and the gradient of every input at
/// 1e-12 in f64, with and without a mask, in both directions, one bias or
/// none; against central differences for every input, second order
/// through the `create_graph` path, forward mode through the composite;
/// empty sequences and batches; the errors.
fn fused_lstm_layer<B: Backend>() {
    let (l, n, i, h) = (4, 3, 2, 3);
    let v = |shape: &[usize], seed: f64| {
        let k: usize = shape.iter().product();
        Tensor::<B>::from_vec((0..k).map(|j| ((j as f64 + seed) * 0.37).sin() * 0.8).collect::<Vec<_>>(), shape.to_vec())
            .requires_grad_(true)
    };
    let inputs = vec![
        v(&[l, n, i], 1.0),
        v(&[n, h], 2.0),
        v(&[n, h], 3.0),
        v(&[4 * h, i], 4.0),
        v(&[4 * h, h], 5.0),
        v(&[4 * h], 6.0),
        v(&[4 * h], 7.0),
    ];
    let mask = Tensor::<B>::from_vec(
        (0..l).flat_map(|t| [4usize, 2, 3].map(|len| if t < len { 1.0f64 } else { 0.0 })).collect::<Vec<_>>(),
        [l, n, 1],
    );
    let fused = |x: &[Tensor<B>], reverse: bool, mask: Option<&Tensor<B>>, biases: usize| {
        let w =
            F::RecurrentWeights { w_ih: &x[3], w_hh: &x[4], b_ih: x.get(5).filter(|_| biases > 0), b_hh: x.get(6).filter(|_| biases > 1) };
        let (out, h, c) = F::try_lstm_layer(&x[0], &x[1], &x[2], &w, reverse, mask).unwrap();
        Tensor::cat(&[out.reshape(&[-1]), h.reshape(&[-1]), c.reshape(&[-1])], 0)
    };
    let composite = |x: &[Tensor<B>], reverse: bool, mask: Option<&Tensor<B>>, biases: usize| {
        let (mut hs, mut cs) = (x[1].clone(), x[2].clone());
        let mut outs = vec![None; l];
        let order: Vec<usize> = if reverse { (0..l).rev().collect() } else { (0..l).collect() };
        for t in order {
            let (b_ih, b_hh) = (x.get(5).filter(|_| biases > 0), x.get(6).filter(|_| biases > 1));
            let (h2, c2) = F::try_lstm_cell(&x[0].select(0, t as isize), &hs, &cs, &x[3], &x[4], b_ih, b_hh).unwrap();
            let m = mask.map(|m| m.select(0, t as isize));
            outs[t] = Some(m.as_ref().map_or(h2.clone(), |m| &h2 * m));
            (hs, cs) = match &m {
                None => (h2, c2),
                Some(m) => (&hs + &(m * &(&h2 - &hs)), &cs + &(m * &(&c2 - &cs))),
            };
        }
        let outs: Vec<Tensor<B>> = outs.into_iter().map(|o| o.unwrap().reshape(&[-1])).collect();
        Tensor::cat(&[Tensor::cat(&outs, 0), hs.reshape(&[-1]), cs.reshape(&[-1])], 0)
    };
    let gout = v(&[(l + 2) * n * h], 8.0).detach();
    for (reverse, masked, biases) in [(false, false, 2), (true, false, 2), (false, true, 2), (true, true, 1), (false, false, 0)] {
        let m = masked.then_some(&mask);
        let what = format!("reverse {reverse}, mask {masked}, {biases} biases");
        let grads = |y: Tensor<B>| {
            let used = 5 + biases;
            autograd_tensor::autograd::grad(&[y], &inputs[..used], Some(std::slice::from_ref(&gout)), Default::default()).unwrap()
        };
        let (yf, yc) = (fused(&inputs, reverse, m, biases), composite(&inputs, reverse, m, biases));
        // one node per layer, below the views of its packed result
        let mut node = yf.grad_fn().unwrap().next_functions()[0].clone().unwrap();
        while node.name() != "LstmLayerBackward0" {
            node = node.next_functions()[0].clone().unwrap_or_else(|| panic!("{what}: no LstmLayerBackward0 below the output"));
        }
        let close = |a: &Tensor<B>, b: &Tensor<B>, what: &str| {
            let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
            assert_eq!(a.len(), b.len(), "{what}");
            for (k, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{what}: element {k}: {x} vs {y}");
            }
        };
        close(&yf, &yc, &format!("{what}: values"));
        for (k, (a, b)) in grads(yf).iter().zip(grads(yc)).enumerate() {
            close(a.as_ref().unwrap(), b.as_ref().unwrap(), &format!("{what}: gradient of input {k}"));
        }
    }
    // central differences, first and second order (the latter through the composite, recomputed)
    let f = |x: &[Tensor<B>]| fused(x, true, Some(&mask), 2);
    gradcheck(f, &inputs, 1e-6, 1e-7, 1e-6).unwrap();
    let small: Vec<Tensor<B>> = inputs.iter().map(|t| t.detach().requires_grad_(true)).collect();
    gradgradcheck(|x: &[Tensor<B>]| fused(x, false, Some(&mask), 2).sum(), &small[..5], 1e-6, 1e-6, 1e-5).unwrap();
    // forward mode: the layer's JVP equals the composite's
    let tangents: Vec<Tensor<B>> = inputs.iter().enumerate().map(|(k, t)| v(t.dims(), 10.0 + k as f64).detach()).collect();
    let (pf, tf) = autograd_tensor::autograd::jvp(|x: &[Tensor<B>]| fused(x, false, Some(&mask), 2), &inputs, &tangents).unwrap();
    let (pc, tc) = autograd_tensor::autograd::jvp(|x: &[Tensor<B>]| composite(x, false, Some(&mask), 2), &inputs, &tangents).unwrap();
    assert_eq!(pf.to_vec_f64(), pc.to_vec_f64());
    assert_eq!(tf.to_vec_f64(), tc.to_vec_f64());
    // empty sequence and empty batch
    let w = F::RecurrentWeights { w_ih: &inputs[3], w_hh: &inputs[4], b_ih: None, b_hh: None };
    let (out, hn, _) =
        F::try_lstm_layer(&Tensor::<B>::zeros_dtype([0, n, i], DType::F64), &inputs[1], &inputs[2], &w, false, None).unwrap();
    assert_eq!(out.dims(), &[0, n, h]);
    assert_eq!(hn.to_vec_f64(), inputs[1].to_vec_f64(), "no step: the state as given");
    hn.sum().backward().unwrap();
    assert_eq!(inputs[1].grad().unwrap().to_vec_f64(), vec![1.0; n * h]);
    let e0 = Tensor::<B>::zeros_dtype([0, h], DType::F64);
    let (out, _, _) = F::try_lstm_layer(&Tensor::<B>::zeros_dtype([l, 0, i], DType::F64), &e0, &e0, &w, false, None).unwrap();
    assert_eq!(out.dims(), &[l, 0, h]);
    // errors name the op and the shapes
    let bad = F::try_lstm_layer(&inputs[1], &inputs[1], &inputs[2], &w, false, None).unwrap_err().to_string();
    assert!(bad.contains("lstm") && bad.contains("[3, 3]"), "{bad}");
    let w_bad = F::RecurrentWeights { w_ih: &inputs[4], ..w };
    assert!(F::try_lstm_layer(&inputs[0], &inputs[1], &inputs[2], &w_bad, false, None).is_err());
    assert!(F::try_lstm_layer(&inputs[0], &inputs[1], &inputs[2], &w, false, Some(&inputs[1])).is_err());
    let f32_mask = mask.to_dtype(DType::F32);
    let bad = F::try_lstm_layer(&inputs[0], &inputs[1], &inputs[2], &w, false, Some(&f32_mask)).unwrap_err().to_string();
    assert!(bad.contains("dtype"), "{bad}");
    // a mask modified in place before backward: an Err, as for any saved tensor
    let m2 = mask.deep_clone();
    let y = fused(&inputs, false, Some(&m2), 2);
    m2.try_add_(&Tensor::<B>::zeros_dtype([l, n, 1], DType::F64)).unwrap();
    let e = y.sum().backward().unwrap_err().to_string();
    assert!(e.contains("inplace") && e.contains("LstmLayerBackward0"), "{e}");
}

/// The fused GRU layer ([`F::try_gru_layer`]) against steps of
/// [`F::try_gru_cell`]: values and every gradient at 1e-12 in f64, with and
/// without a mask, both directions, each bias alone (the hidden bias sits
/// inside the reset gate, so which one is given matters); central
/// differences of first and second order.
fn fused_gru_layer<B: Backend>() {
    let (l, n, i, h) = (4, 3, 2, 3);
    let v = |shape: &[usize], seed: f64| {
        let k: usize = shape.iter().product();
        Tensor::<B>::from_vec((0..k).map(|j| ((j as f64 + seed) * 0.53).cos() * 0.7).collect::<Vec<_>>(), shape.to_vec())
            .requires_grad_(true)
    };
    let all = [v(&[l, n, i], 1.0), v(&[n, h], 2.0), v(&[3 * h, i], 4.0), v(&[3 * h, h], 5.0), v(&[3 * h], 6.0), v(&[3 * h], 7.0)];
    let mask = Tensor::<B>::from_vec(
        (0..l).flat_map(|t| [2usize, 4, 1].map(|len| if t < len { 1.0f64 } else { 0.0 })).collect::<Vec<_>>(),
        [l, n, 1],
    );
    // the inputs a case uses: x, h0, w_ih, w_hh and the biases it gives
    let used = |b_ih: bool, b_hh: bool| -> Vec<Tensor<B>> {
        all[..4].iter().cloned().chain(b_ih.then(|| all[4].clone())).chain(b_hh.then(|| all[5].clone())).collect()
    };
    let weights = |x: &[Tensor<B>], b_ih: bool, b_hh: bool| -> (Option<Tensor<B>>, Option<Tensor<B>>) {
        let mut rest = x[4..].iter().cloned();
        (if b_ih { rest.next() } else { None }, if b_hh { rest.next() } else { None })
    };
    let fused = |x: &[Tensor<B>], reverse: bool, mask: Option<&Tensor<B>>, b_ih: bool, b_hh: bool| {
        let (bi, bh) = weights(x, b_ih, b_hh);
        let w = F::RecurrentWeights { w_ih: &x[2], w_hh: &x[3], b_ih: bi.as_ref(), b_hh: bh.as_ref() };
        let (out, hn) = F::try_gru_layer(&x[0], &x[1], &w, reverse, mask).unwrap();
        Tensor::cat(&[out.reshape(&[-1]), hn.reshape(&[-1])], 0)
    };
    let composite = |x: &[Tensor<B>], reverse: bool, mask: Option<&Tensor<B>>, b_ih: bool, b_hh: bool| {
        let (bi, bh) = weights(x, b_ih, b_hh);
        let mut hs = x[1].clone();
        let mut outs = vec![None; l];
        let order: Vec<usize> = if reverse { (0..l).rev().collect() } else { (0..l).collect() };
        for t in order {
            let h2 = F::try_gru_cell(&x[0].select(0, t as isize), &hs, &x[2], &x[3], bi.as_ref(), bh.as_ref()).unwrap();
            let m = mask.map(|m| m.select(0, t as isize));
            outs[t] = Some(m.as_ref().map_or(h2.clone(), |m| &h2 * m));
            hs = match &m {
                None => h2,
                Some(m) => &hs + &(m * &(&h2 - &hs)),
            };
        }
        let outs: Vec<Tensor<B>> = outs.into_iter().map(|o| o.unwrap().reshape(&[-1])).collect();
        Tensor::cat(&[Tensor::cat(&outs, 0), hs.reshape(&[-1])], 0)
    };
    let gout = v(&[(l + 1) * n * h], 8.0).detach();
    let close = |a: &Tensor<B>, b: &Tensor<B>, what: &str| {
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        assert_eq!(a.len(), b.len(), "{what}");
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{what}: element {k}: {x} vs {y}");
        }
    };
    for (reverse, masked, b_ih, b_hh) in [
        (false, false, true, true),
        (true, false, true, true),
        (false, true, true, true),
        (true, true, false, true),
        (false, false, true, false),
    ] {
        let m = masked.then_some(&mask);
        let what = format!("reverse {reverse}, mask {masked}, biases {b_ih}/{b_hh}");
        let x = used(b_ih, b_hh);
        let grads =
            |y: Tensor<B>| autograd_tensor::autograd::grad(&[y], &x, Some(std::slice::from_ref(&gout)), Default::default()).unwrap();
        let (yf, yc) = (fused(&x, reverse, m, b_ih, b_hh), composite(&x, reverse, m, b_ih, b_hh));
        let mut node = yf.grad_fn().unwrap().next_functions()[0].clone().unwrap();
        while node.name() != "GruLayerBackward0" {
            node = node.next_functions()[0].clone().unwrap_or_else(|| panic!("{what}: no GruLayerBackward0 below the output"));
        }
        close(&yf, &yc, &format!("{what}: values"));
        for (k, (a, b)) in grads(yf).iter().zip(grads(yc)).enumerate() {
            close(a.as_ref().unwrap(), b.as_ref().unwrap(), &format!("{what}: gradient of input {k}"));
        }
    }
    let x = used(false, true);
    gradcheck(|x: &[Tensor<B>]| fused(x, true, Some(&mask), false, true), &x, 1e-6, 1e-7, 1e-6).unwrap();
    let small: Vec<Tensor<B>> = used(true, true).iter().map(|t| t.detach().requires_grad_(true)).collect();
    gradgradcheck(|x: &[Tensor<B>]| fused(x, false, Some(&mask), true, true).sum(), &small, 1e-6, 1e-6, 1e-5).unwrap();
    let w = F::RecurrentWeights { w_ih: &all[2], w_hh: &all[3], b_ih: None, b_hh: None };
    let bad = F::try_gru_layer(&all[0], &all[1], &F::RecurrentWeights { w_ih: &all[3], ..w }, false, None).unwrap_err().to_string();
    assert!(bad.contains("gru") && bad.contains("[9, 3]"), "{bad}");
}

trait ForwardSeq<B: Backend> {
    fn forward_seq(&self, x: &Tensor<B>) -> Tensor<B>;
}

impl<B: Backend> ForwardSeq<B> for autograd_nn::Recurrent<B> {
    fn forward_seq(&self, x: &Tensor<B>) -> Tensor<B> {
        autograd_nn::Module::forward(self, x)
    }
}

autograd_testkit::for_backends!(with_traced: layers, packed_sequences, cells, gradients_and_errors, fused_lstm_layer, fused_gru_layer);
