//! One case of a PyTorch fixture file (`<case>/<role>/<name>` tensors, as
//! the `make_fixtures.py` scripts under `autograd-testkit/fixtures` write
//! them): load it, compare outputs and gradients at float64 1e-10, float32
//! 1e-5.

use autograd_core::{Backend, DType};
use autograd_nn::{LoadOptions, ModuleExt};
use autograd_tensor::Tensor;
use std::collections::BTreeMap;

pub struct Case<B: Backend> {
    pub name: &'static str,
    all: BTreeMap<String, Tensor<B>>,
}

impl<B: Backend> Case<B> {
    /// The tensors of case `name` in the fixture `file` (relative to the fixtures folder).
    pub fn load(file: &str, name: &'static str) -> Self {
        let file = autograd_nn::load_safetensors::<B>(autograd_testkit::fixture(file)).unwrap();
        let prefix = format!("{name}/");
        let all: BTreeMap<_, _> =
            file.tensors.into_iter().filter_map(|(n, t)| n.strip_prefix(&prefix).map(|r| (r.to_string(), t))).collect();
        assert!(!all.is_empty(), "no case {name}");
        Case { name, all }
    }
    pub fn get(&self, key: &str) -> Tensor<B> {
        self.all.get(key).unwrap_or_else(|| panic!("{}: no tensor {key}", self.name)).clone()
    }
    pub fn has(&self, key: &str) -> bool {
        self.all.contains_key(key)
    }
    pub fn role(&self, role: &str) -> BTreeMap<String, Tensor<B>> {
        let p = format!("{role}/");
        self.all.iter().filter_map(|(n, t)| n.strip_prefix(&p).map(|r| (r.to_string(), t.clone()))).collect()
    }
    /// Loads the case's PyTorch state dict into `m` (strict: every name matches).
    pub fn load_into(&self, m: &mut impl ModuleExt<B>) {
        m.load_state_dict(&self.role("param"), LoadOptions::default()).unwrap();
    }
    /// An input, as a leaf that requires grad when it is floating point.
    pub fn input(&self, n: &str) -> Tensor<B> {
        let t = self.get(&format!("in/{n}"));
        if t.dtype().is_float() { t.detach().requires_grad_(true) } else { t }
    }
    pub fn close(&self, what: &str, got: &Tensor<B>, want: &Tensor<B>) {
        assert_eq!(got.dims(), want.dims(), "{}: {what}: shape", self.name);
        assert_eq!(got.dtype(), want.dtype(), "{}: {what}: dtype", self.name);
        let tol = if want.dtype() == DType::F64 { 1e-10 } else { 1e-5 };
        for (i, (g, w)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
            let ok = *g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
            assert!(ok, "{}: {what}[{i}]: got {g}, PyTorch {w}", self.name);
        }
    }
    /// Compares `outs` with `out/*`, backpropagates `sum(out * gout)`, and
    /// compares every parameter's gradient with `grad/*`, the inputs'
    /// with `gin/*`, and the buffers with `after/*` when the case has them.
    pub fn check(&self, m: &impl ModuleExt<B>, outs: &[(&str, &Tensor<B>)], inputs: &[(&str, &Tensor<B>)]) {
        let mut loss: Option<Tensor<B>> = None;
        for (n, o) in outs {
            self.close(&format!("out/{n}"), o, &self.get(&format!("out/{n}")));
            let term = (*o * &self.get(&format!("gout/{n}"))).sum();
            loss = Some(match loss {
                Some(l) => l + term,
                None => term,
            });
        }
        loss.expect("an output").backward().unwrap();
        let grads = self.role("grad");
        let params = m.named_parameters();
        assert_eq!(grads.len(), params.len(), "{}: every parameter has PyTorch's gradient", self.name);
        for (n, p) in params {
            self.close(&format!("grad/{n}"), &p.grad().expect("a gradient"), &grads[&n]);
        }
        for (n, x) in inputs {
            if self.has(&format!("gin/{n}")) {
                self.close(&format!("gin/{n}"), &x.grad().expect("a gradient"), &self.get(&format!("gin/{n}")));
            }
        }
        let after = self.role("after");
        let buffers = m.named_buffers();
        assert_eq!(after.len(), buffers.len(), "{}: every buffer has PyTorch's value", self.name);
        for (n, b) in buffers {
            self.close(&format!("after/{n}"), &b, &after[&n]);
        }
    }
}
