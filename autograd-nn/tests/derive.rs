//! `#[derive(Module)]`: names, kinds and containers as PyTorch lists them.

use autograd_core::{Backend, DType, RefBackend, Result};
use autograd_cpu::Cpu;
use autograd_nn::Linear;
use autograd_nn::{Dropout, LayerNorm, LinearConfig, LoadOptions, Module, ModuleExt, ModuleFields, Parameter, ReLU};
use autograd_tensor::Tensor;
use std::collections::BTreeMap;

/// Every field shape the derive understands, in one module.
#[derive(Module)]
struct Everything<B: Backend> {
    stem: Linear<B>,
    blocks: Vec<Linear<B>>,
    head: Option<Linear<B>>,
    absent: Option<Linear<B>>,
    act: Box<dyn Module<B>>,
    scales: Vec<Parameter<B>>,
    gain: Option<Parameter<B>>,
    #[buffer]
    running: Tensor<B>,
    #[buffer]
    counts: Option<Tensor<B>>,
    drop: Dropout,
    norm: LayerNorm<B>,
    #[module(skip)]
    label: &'static str,
    width: usize,
    dims: Vec<usize>,
    dtype: DType,
}

impl<B: Backend> Module<B> for Everything<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let mut h = self.act.try_forward(&self.stem.try_forward(x)?)?;
        for b in &self.blocks {
            h = b.try_forward(&h)?;
        }
        self.norm.try_forward(&self.drop.try_forward(&h)?)
    }
}

fn everything<B: Backend>() -> Everything<B> {
    Everything {
        stem: Linear::new(3, 4),
        blocks: vec![Linear::new(4, 4), LinearConfig::new(4, 4).with_bias(false).init()],
        head: Some(Linear::new(4, 2)),
        absent: None,
        act: Box::new(ReLU),
        scales: vec![Parameter::new(Tensor::ones([4])), Parameter::new(Tensor::ones([4]))],
        gain: Some(Parameter::new(Tensor::ones([1]))),
        running: Tensor::zeros([4]),
        counts: Some(Tensor::from_vec(vec![0i64], [])),
        drop: Dropout::new(0.0),
        norm: LayerNorm::new(&[4]),
        label: "x",
        width: 4,
        dims: vec![4],
        dtype: DType::F32,
    }
}

#[test]
fn names_follow_pytorch_module_list_and_optional_children() {
    let m = everything::<RefBackend>();
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "scales.0",
            "scales.1",
            "gain",
            "stem.weight",
            "stem.bias",
            "blocks.0.weight",
            "blocks.0.bias",
            "blocks.1.weight",
            "head.weight",
            "head.bias",
            "norm.weight",
            "norm.bias"
        ]
    );
    let buffers: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers, ["running", "counts"]);
    let modules: Vec<String> = m.named_modules().into_iter().map(|(n, _)| n).collect();
    assert_eq!(modules, ["", "stem", "blocks.0", "blocks.1", "head", "act", "drop", "norm"]);
    assert_eq!(m.type_name(), "Everything");
    assert_eq!(m.stem.type_name(), "Linear");
    assert_eq!(ModuleFields::<RefBackend>::type_name(&ReLU), "ReLU");
    let (_, _, _, _) = (m.label, m.width, &m.dims, m.dtype);
    assert_eq!(m.forward(&Tensor::ones([2, 3])).dims(), &[2, 4]);
}

#[test]
fn train_and_eval_reach_children_in_vectors_and_boxes() {
    let m = everything::<RefBackend>();
    m.eval();
    assert!(!Module::<RefBackend>::is_training(&m.drop));
    m.train();
    assert!(Module::<RefBackend>::is_training(&m.drop));
}

#[test]
fn buffers_are_in_the_state_dict_and_round_trip() {
    let m = everything::<RefBackend>();
    let sd = m.state_dict();
    assert!(sd.contains_key("running") && sd.contains_key("counts") && sd.contains_key("blocks.1.weight"));
    let mut other = everything::<RefBackend>();
    let mut changed: BTreeMap<String, Tensor<RefBackend>> = sd.clone();
    changed.insert("running".into(), Tensor::full([4], 3.0));
    changed.insert("counts".into(), Tensor::from_vec(vec![7i64], []));
    other.load_state_dict(&changed, LoadOptions::default()).unwrap();
    assert_eq!(other.running.to_vec::<f32>(), vec![3.0; 4]);
    assert_eq!(other.counts.as_ref().unwrap().to_vec::<i64>(), vec![7]);
    assert_eq!(other.stem.weight.tensor().to_vec::<f32>(), m.stem.weight.tensor().to_vec::<f32>());
    // A missing buffer is reported like a missing parameter, and nothing is written.
    changed.remove("running");
    changed.insert("stem.bias".into(), Tensor::full([4], 9.0));
    let e = other.load_state_dict(&changed, LoadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("missing keys [\"running\"]"), "{e}");
    assert_ne!(other.stem.bias.as_ref().unwrap().tensor().to_vec::<f32>(), vec![9.0; 4]);
}

#[test]
fn to_dtype_converts_float_buffers_and_keeps_integer_ones() {
    let mut m = everything::<Cpu>();
    let _ = m.gain.as_ref().unwrap().tensor().clone().requires_grad_(false);
    m.to_dtype(DType::F64);
    assert_eq!(m.running.dtype(), DType::F64);
    assert_eq!(m.counts.as_ref().unwrap().dtype(), DType::I64);
    assert!(m.named_parameters().iter().all(|(_, p)| p.dtype() == DType::F64));
    // A frozen parameter stays frozen.
    assert!(!m.gain.as_ref().unwrap().tensor().requires_grad());
    assert!(m.stem.weight.tensor().requires_grad());
}

/// A non-generic model names its backend.
#[derive(Module)]
#[module(backend = Cpu)]
struct TwoLayer {
    fc1: Linear<Cpu>,
    fc2: Linear<Cpu>,
}

impl Module<Cpu> for TwoLayer {
    fn try_forward(&self, x: &Tensor<Cpu>) -> Result<Tensor<Cpu>> {
        self.fc2.try_forward(&self.fc1.try_forward(x)?.try_relu()?)
    }
}

#[test]
fn concrete_backend_model() {
    let m = TwoLayer { fc1: Linear::new(2, 3), fc2: Linear::new(3, 1) };
    assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]);
    assert_eq!(m.forward(&Tensor::ones([5, 2])).dims(), &[5, 1]);
}

/// Tuple structs number their fields.
#[derive(Module)]
struct Pair<B: Backend>(Linear<B>, Linear<B>);

impl<B: Backend> Module<B> for Pair<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.1.try_forward(&self.0.try_forward(x)?)
    }
}

#[test]
fn tuple_struct_fields_are_numbered() {
    let m = Pair::<RefBackend>(Linear::new(2, 2), Linear::new(2, 2));
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
}

/// A module of one's own whose forward depends on its mode keeps a
/// `TrainingFlag`: the derive treats it as configuration (no child, no
/// parameter), and reading it with `get` while a step is captured
/// registers a guard that fails once the mode flips.
#[derive(Module)]
struct Noisy<B: Backend> {
    lin: Linear<B>,
    training: autograd_nn::TrainingFlag,
}

impl<B: Backend> Module<B> for Noisy<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let y = self.lin.try_forward(x)?;
        if self.training.get("Noisy") { y.try_add_scalar(0.5) } else { Ok(y) }
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}

#[test]
fn a_training_flag_is_configuration_and_guards_a_capture() {
    use autograd_tensor::capture;
    let m = Noisy::<RefBackend> { lin: LinearConfig::new(2, 2).init(), training: Default::default() };
    assert_eq!(m.named_parameters().len(), 2);
    assert_eq!(m.children().len(), 1);
    let c = capture::begin_capture();
    assert!(m.training.get("Noisy"));
    let guards = c.take_guards();
    drop(c);
    assert_eq!((guards.len(), guards[0].describe()), (1, "Noisy.training == true".to_string()));
    assert!(guards[0].holds());
    m.training.set(false);
    assert!(!guards[0].holds());
}
