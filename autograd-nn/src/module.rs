//! The `Module` trait: forward, named parameters with PyTorch's dotted
//! names, train/eval, state dicts.

use crate::Parameter;
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::{no_grad, Tensor};
use std::collections::BTreeMap;

/// A layer or a model. Implementors give `try_forward` and list their own
/// parameters and child modules; everything else (dotted names, train/eval,
/// state dicts, safetensors) is provided by [`ModuleExt`].
///
/// Errors follow one convention: `try_forward` returns an `Err` naming the
/// op, the shapes and the caller's line (both methods are
/// `#[track_caller]`, through every nested module, so the line is the
/// user's, not the library's); `forward` panics with that message there.
///
/// ```
/// use autograd_nn::{Module, ModuleExt, Linear, Parameter};
/// use autograd_core::{RefBackend, DType, Result};
/// use autograd_tensor::Tensor;
/// /// A custom module: two linears with a skip connection.
/// struct Residual { a: Linear<RefBackend>, b: Linear<RefBackend> }
/// impl Module<RefBackend> for Residual {
///     fn try_forward(&self, x: &Tensor<RefBackend>) -> Result<Tensor<RefBackend>> {
///         x.try_add(&self.b.try_forward(&self.a.try_forward(x)?.try_relu()?)?)
///     }
///     fn children(&self) -> Vec<(String, &dyn Module<RefBackend>)> {
///         vec![("a".into(), &self.a), ("b".into(), &self.b)]
///     }
///     fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<RefBackend>)> {
///         vec![("a".into(), &mut self.a), ("b".into(), &mut self.b)]
///     }
/// }
/// let m = Residual { a: Linear::new(4, 8, true, DType::F32), b: Linear::new(8, 4, true, DType::F32) };
/// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["a.weight", "a.bias", "b.weight", "b.bias"]);
/// assert_eq!(m.num_parameters(), 4 * 8 + 8 + 8 * 4 + 4);
/// let e = m.try_forward(&Tensor::zeros([2, 5], DType::F32)).unwrap_err().to_string();
/// assert!(e.contains("[2, 5]") && e.contains(file!()), "{e}");
/// ```
pub trait Module<B: Backend>: Send + Sync {
    /// Applies the module; `Err` for inputs it cannot take.
    #[track_caller]
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>>;
    /// Applies the module, panicking at the caller's line where
    /// [`Module::try_forward`] is an `Err`.
    #[track_caller]
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        match self.try_forward(x) {
            Ok(y) => y,
            Err(e) => panic!("{e}"),
        }
    }
    /// This module's own parameters (not its children's), by local name.
    fn params(&self) -> Vec<(&'static str, &Parameter<B>)> {
        Vec::new()
    }
    /// Mutable access to the same parameters.
    fn params_mut(&mut self) -> Vec<(&'static str, &mut Parameter<B>)> {
        Vec::new()
    }
    /// Child modules by local name.
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        Vec::new()
    }
    /// Mutable access to the same children.
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        Vec::new()
    }
    /// Switches this module's own training behaviour (dropout); children are handled by [`ModuleExt::train`].
    fn set_training(&mut self, _on: bool) {}
    /// Whether the module is in training mode.
    fn is_training(&self) -> bool {
        self.children().first().is_none_or(|(_, c)| c.is_training())
    }
    /// The PyTorch class name, for printing.
    fn type_name(&self) -> &'static str {
        "Module"
    }
}

/// Load problems, all of them, as `load_state_dict` reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Parameters the state dict did not provide.
    pub missing: Vec<String>,
    /// Entries that match no parameter.
    pub unexpected: Vec<String>,
    /// `(name, expected, got)` shape mismatches.
    pub shape_mismatches: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// `(name, expected, got)` dtype mismatches (when not converting).
    pub dtype_mismatches: Vec<(String, DType, DType)>,
}

impl LoadReport {
    /// No problem at all.
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.shape_mismatches.is_empty() && self.dtype_mismatches.is_empty()
    }
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing keys {:?}", self.missing));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected keys {:?}", self.unexpected));
        }
        for (n, e, g) in &self.shape_mismatches {
            parts.push(format!("size mismatch for {n}: the model has {e:?}, the state dict {g:?}"));
        }
        for (n, e, g) in &self.dtype_mismatches {
            parts.push(format!("dtype mismatch for {n}: the model has {e:?}, the state dict {g:?} (load with convert_dtype to convert)"));
        }
        parts.join("; ")
    }
}

fn walk<'a, B: Backend>(m: &'a dyn Module<B>, prefix: &str, out: &mut Vec<(String, &'a Parameter<B>)>) {
    for (n, p) in m.params() {
        out.push((join(prefix, n), p));
    }
    for (n, c) in m.children() {
        walk(c, &join(prefix, &n), out);
    }
}

fn walk_mut<B: Backend>(m: &mut dyn Module<B>, prefix: &str, f: &mut dyn FnMut(String, &mut Parameter<B>)) {
    for (n, p) in m.params_mut() {
        f(join(prefix, n), p);
    }
    for (n, c) in m.children_mut() {
        walk_mut(c, &join(prefix, &n), f);
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn set_training_rec<B: Backend>(m: &mut dyn Module<B>, on: bool) {
    m.set_training(on);
    for (_, c) in m.children_mut() {
        set_training_rec(c, on);
    }
}

fn modules_rec<'a, B: Backend>(m: &'a dyn Module<B>, prefix: &str, out: &mut Vec<(String, &'a dyn Module<B>)>) {
    out.push((prefix.to_string(), m));
    for (n, c) in m.children() {
        modules_rec(c, &join(prefix, &n), out);
    }
}

/// Everything a module gets from listing its parameters and children.
pub trait ModuleExt<B: Backend>: Module<B> {
    /// Parameters with dotted PyTorch names (`layers.0.weight`), in definition order.
    fn named_parameters(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        walk(self.as_dyn(), "", &mut out);
        out.into_iter().map(|(n, p)| (n, p.tensor().clone())).collect()
    }
    /// The parameter tensors.
    fn parameters(&self) -> Vec<Tensor<B>> {
        self.named_parameters().into_iter().map(|(_, t)| t).collect()
    }
    /// This module and all descendants with dotted names (`""` for the root).
    fn named_modules(&self) -> Vec<(String, &dyn Module<B>)> {
        let mut out = Vec::new();
        modules_rec(self.as_dyn(), "", &mut out);
        out
    }
    /// Number of scalar parameters.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }
    /// Training mode for this module and every descendant.
    fn train(&mut self) {
        set_training_rec(self.as_dyn_mut(), true)
    }
    /// Evaluation mode (dropout off) for this module and every descendant.
    fn eval(&mut self) {
        set_training_rec(self.as_dyn_mut(), false)
    }
    /// Clears gradients: `None` with `set_to_none`, zeros in place otherwise.
    fn zero_grad(&self, set_to_none: bool) {
        for p in self.parameters() {
            match p.grad() {
                Some(g) if !set_to_none => no_grad(|| g.zero_()),
                _ => p.set_grad(None),
            }
        }
    }
    /// Converts every parameter to `dtype` (new leaf tensors; gradients dropped).
    fn to_dtype(&mut self, dtype: DType) {
        walk_mut(self.as_dyn_mut(), "", &mut |_, p| p.set(p.tensor().to_dtype(dtype).detach().requires_grad_(true)));
    }
    /// Name -> detached parameter tensor (sharing storage), in name order.
    fn state_dict(&self) -> BTreeMap<String, Tensor<B>> {
        self.named_parameters().into_iter().map(|(n, t)| (n, t.detach())).collect()
    }
    /// Loads values by name. Everything is validated before anything is
    /// written: with `strict`, any missing or unexpected key is an error;
    /// shape mismatches always are, dtype mismatches unless `convert_dtype`.
    /// On error the model is unchanged and the message lists every problem;
    /// on success the report lists what non-strict loading skipped.
    fn load_state_dict(&mut self, state: &BTreeMap<String, Tensor<B>>, strict: bool, convert_dtype: bool) -> Result<LoadReport> {
        let params = self.named_parameters();
        let mut report = LoadReport::default();
        for (n, p) in &params {
            match state.get(n) {
                None => report.missing.push(n.clone()),
                Some(t) if t.dims() != p.dims() => report.shape_mismatches.push((n.clone(), p.dims().to_vec(), t.dims().to_vec())),
                Some(t) if t.dtype() != p.dtype() && !(convert_dtype && t.dtype().is_float()) => {
                    report.dtype_mismatches.push((n.clone(), p.dtype(), t.dtype()))
                }
                Some(_) => {}
            }
        }
        for k in state.keys() {
            if !params.iter().any(|(n, _)| n == k) {
                report.unexpected.push(k.clone());
            }
        }
        let fatal = !report.shape_mismatches.is_empty() || !report.dtype_mismatches.is_empty() || (strict && !report.is_clean());
        if fatal {
            return Err(Error::Format(format!("error(s) in loading state_dict for {}: {}", self.type_name(), report.describe())));
        }
        no_grad(|| -> Result<()> {
            for (n, p) in &params {
                if let Some(t) = state.get(n) {
                    p.try_copy_(t)?;
                }
            }
            Ok(())
        })?;
        Ok(report)
    }
    /// Saves the state dict as safetensors (atomically), readable by `safetensors.torch.load_file`.
    fn save_safetensors(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let sd = self.state_dict();
        let named: Vec<(&str, &Tensor<B>)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let meta = [("format".to_string(), "pt".to_string())].into_iter().collect();
        crate::save_safetensors(&named, &meta, path)
    }
    /// Loads a safetensors file strictly, converting f16/bf16/f64 to the model's dtypes;
    /// a bad or mismatched file is an `Err` and leaves the model unchanged.
    fn load_safetensors(&mut self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let file = crate::load_safetensors::<B>(path.as_ref())?;
        let sd: BTreeMap<String, Tensor<B>> = file.tensors.into_iter().collect();
        self.load_state_dict(&sd, true, true).map(|_| ()).map_err(|e| Error::Format(format!("{}: {e}", path.as_ref().display())))
    }
    #[doc(hidden)]
    fn as_dyn(&self) -> &dyn Module<B>;
    #[doc(hidden)]
    fn as_dyn_mut(&mut self) -> &mut dyn Module<B>;
}

impl<B: Backend, M: Module<B>> ModuleExt<B> for M {
    fn as_dyn(&self) -> &dyn Module<B> {
        self
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module<B> {
        self
    }
}

/// The same helpers on a trait object (`Box<dyn Module<B>>`, `Arc<dyn Module<B>>`).
impl<B: Backend> ModuleExt<B> for dyn Module<B> {
    fn as_dyn(&self) -> &dyn Module<B> {
        self
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module<B> {
        self
    }
}
