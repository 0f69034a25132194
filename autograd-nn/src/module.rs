//! The `Module` trait: forward, named parameters with PyTorch's dotted
//! names, train/eval, state dicts.

use crate::Parameter;
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::{Tensor, no_grad};

pub use autograd_derive::Module;
use std::collections::BTreeMap;

/// A layer or a model: its forward, and (through [`ModuleFields`], which
/// `#[derive(Module)]` writes) what it owns. Everything else (dotted names,
/// train/eval, state dicts, safetensors) is provided by [`ModuleExt`].
///
/// Errors follow one convention: `try_forward` returns an `Err` naming the
/// op, the shapes and the caller's line (both methods are
/// `#[track_caller]`, through every nested module, so the line is the
/// user's, not the library's); `forward` panics with that message there.
///
/// ```
/// use autograd_nn::{Linear, Module, ModuleExt};
/// use autograd_core::{RefBackend, Backend, Result};
/// use autograd_tensor::Tensor;
/// /// A custom module: two linears with a skip connection.
/// #[derive(Module)]
/// struct Residual<B: Backend> { a: Linear<B>, b: Linear<B> }
/// impl<B: Backend> Module<B> for Residual<B> {
///     fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
///         x.try_add(&self.b.try_forward(&self.a.try_forward(x)?.try_relu()?)?)
///     }
/// }
/// let m = Residual::<RefBackend> { a: Linear::new(4, 8), b: Linear::new(8, 4) };
/// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["a.weight", "a.bias", "b.weight", "b.bias"]);
/// assert_eq!(m.num_parameters(), 4 * 8 + 8 + 8 * 4 + 4);
/// let e = m.try_forward(&Tensor::zeros([2, 5])).unwrap_err().to_string();
/// assert!(e.contains("[2, 5]") && e.contains(file!()), "{e}");
/// ```
pub trait Module<B: Backend>: ModuleFields<B> + Send + Sync {
    /// Applies the module; `Err` for inputs it cannot take.
    #[track_caller]
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>>;
    /// Applies the module, panicking at the caller's line where
    /// [`Module::try_forward`] is an `Err`.
    #[track_caller]
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        autograd_core::ResultExt::or_panic(self.try_forward(x))
    }
    /// Switches this module's own training behaviour (dropout, batch
    /// statistics); children are handled by [`ModuleExt::train`]. Takes
    /// `&self` (the flag is atomic), so switching modes never needs
    /// exclusive access: a model whose layers a graph still holds (as
    /// checkpointing does) switches too.
    fn set_training(&self, _on: bool) {}
    /// Whether the module is in training mode. A module whose behaviour
    /// does not depend on the mode has no flag of its own: it reports false
    /// when any child is in evaluation mode, true otherwise.
    fn is_training(&self) -> bool {
        self.children().iter().all(|(_, c)| c.is_training())
    }
}

/// What a module owns, by local name: its own parameters, buffers (state
/// that is saved but not trained, such as running statistics) and child
/// modules. `#[derive(Module)]` writes it from the struct's fields (see
/// [`autograd_derive`](macro@crate::Module)); write it by hand only for
/// containers whose children are not fields (as [`crate::Sequential`]).
///
/// ```
/// use autograd_nn::{Module, ModuleExt, ModuleFields, Parameter};
/// use autograd_core::{Backend, RefBackend, Result};
/// use autograd_tensor::Tensor;
/// #[derive(Module)]
/// struct Scale<B: Backend> {
///     weights: Vec<Parameter<B>>,
///     #[buffer]
///     calls: Tensor<B>,
///     eps: f64, // configuration: not listed
/// }
/// impl<B: Backend> Module<B> for Scale<B> {
///     fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
///         x.try_mul(self.weights[0].tensor())
///     }
/// }
/// let m = Scale::<RefBackend> { weights: vec![Parameter::new(Tensor::ones([2])), Parameter::new(Tensor::ones([2]))], calls: Tensor::zeros([1]), eps: 0.0 };
/// assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["calls", "weights.0", "weights.1"]);
/// assert_eq!(m.type_name(), "Scale");
/// ```
pub trait ModuleFields<B: Backend> {
    /// This module's own parameters (not its children's), by local name.
    fn params(&self) -> Vec<(String, &Parameter<B>)> {
        Vec::new()
    }
    /// Mutable access to the same parameters.
    fn params_mut(&mut self) -> Vec<(String, &mut Parameter<B>)> {
        Vec::new()
    }
    /// This module's own buffers, by local name.
    fn buffers(&self) -> Vec<(String, &Tensor<B>)> {
        Vec::new()
    }
    /// Mutable access to the same buffers.
    fn buffers_mut(&mut self) -> Vec<(String, &mut Tensor<B>)> {
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
    /// The PyTorch class name, for printing and error messages.
    fn type_name(&self) -> &'static str {
        "Module"
    }
}

/// Options of [`ModuleExt::load_state_dict`]. `Default` is PyTorch's:
/// strict, no dtype conversion, names as they are.
///
/// ```
/// use autograd_nn::LoadOptions;
/// let lenient = LoadOptions { strict: false, ..Default::default() };
/// assert!(LoadOptions::default().strict && !lenient.convert_dtype);
/// // a state dict saved from a wrapper (DDP's `module.`): its names without the prefix
/// let ddp = LoadOptions::default().with_prefix("module.");
/// assert_eq!(ddp.prefix.as_deref(), Some("module."));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Every parameter must be provided and every entry used.
    pub strict: bool,
    /// Convert floating-point entries of another dtype (f16/bf16/f64 files into an f32 model).
    pub convert_dtype: bool,
    /// Load only the entries whose names start with this prefix, with the
    /// prefix removed (PyTorch users' `consume_prefix_in_state_dict_if_present`
    /// for `module.`, or a sub-module's entries out of a whole model's dict);
    /// strict mode counts the other entries as unexpected.
    pub prefix: Option<String>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { strict: true, convert_dtype: false, prefix: None }
    }
}

impl LoadOptions {
    /// Sets [`LoadOptions::prefix`].
    pub fn with_prefix(self, prefix: impl Into<String>) -> Self {
        LoadOptions { prefix: Some(prefix.into()), ..self }
    }
}

/// Load problems, all of them, as `load_state_dict` reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Parameters or buffers the state dict did not provide.
    pub missing: Vec<String>,
    /// Entries that match no parameter or buffer.
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
        out.push((join(prefix, &n), p));
    }
    for (n, c) in m.children() {
        walk(c, &join(prefix, &n), out);
    }
}

fn walk_buffers<'a, B: Backend>(m: &'a dyn Module<B>, prefix: &str, out: &mut Vec<(String, &'a Tensor<B>)>) {
    for (n, t) in m.buffers() {
        out.push((join(prefix, &n), t));
    }
    for (n, c) in m.children() {
        walk_buffers(c, &join(prefix, &n), out);
    }
}

fn walk_mut<B: Backend>(
    m: &mut dyn Module<B>,
    prefix: &str,
    on_param: &mut dyn FnMut(String, &mut Parameter<B>),
    on_buffer: &mut dyn FnMut(String, &mut Tensor<B>),
) {
    for (n, p) in m.params_mut() {
        on_param(join(prefix, &n), p);
    }
    for (n, t) in m.buffers_mut() {
        on_buffer(join(prefix, &n), t);
    }
    for (n, c) in m.children_mut() {
        walk_mut(c, &join(prefix, &n), on_param, on_buffer);
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}

fn set_training_rec<B: Backend>(m: &dyn Module<B>, on: bool) {
    m.set_training(on);
    for (_, c) in m.children() {
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
    /// Buffers with dotted names (`bn.running_mean`), in definition order.
    fn named_buffers(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        walk_buffers(self.as_dyn(), "", &mut out);
        out.into_iter().map(|(n, t)| (n, t.clone())).collect()
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
    fn train(&self) {
        set_training_rec(self.as_dyn(), true)
    }
    /// Evaluation mode (dropout off) for this module and every descendant.
    fn eval(&self) {
        set_training_rec(self.as_dyn(), false)
    }
    /// Freezes (`false`) or unfreezes every parameter of this module and its
    /// descendants, as PyTorch's `module.requires_grad_(False)`: a frozen
    /// parameter gets no gradient from `backward`, and optimizers and
    /// gradient clipping leave it untouched (even with a gradient left from
    /// before it was frozen). Returns `self` for chaining.
    ///
    /// ```
    /// use autograd_nn::{Linear, ModuleExt, Module};
    /// use autograd_core::RefBackend;
    /// use autograd_tensor::Tensor;
    /// let l = Linear::<RefBackend>::new(2, 1);
    /// l.requires_grad_(false);
    /// assert!(l.parameters().iter().all(|p| !p.requires_grad()));
    /// assert!(!l.forward(&Tensor::ones([1, 2])).requires_grad());
    /// ```
    fn requires_grad_(&self, on: bool) -> &Self {
        for p in self.parameters() {
            // parameters are leaves of a float dtype: this cannot fail
            let _ = p.try_requires_grad_(on);
        }
        self
    }
    /// Clears gradients: `None` with `set_to_none`, zeros in place otherwise.
    fn zero_grad(&self, set_to_none: bool) {
        for p in self.parameters() {
            p.clear_grad(set_to_none);
        }
    }
    /// Converts every parameter and every floating-point buffer to `dtype`
    /// (new leaf tensors; gradients dropped; integer buffers such as
    /// `num_batches_tracked` stay integer, as PyTorch's `module.to(dtype)`).
    fn to_dtype(&mut self, dtype: DType) {
        walk_mut(self.as_dyn_mut(), "", &mut |_, p| p.set(p.tensor().to_dtype(dtype)), &mut |_, t| {
            if t.dtype().is_float() {
                *t = t.to_dtype(dtype).detach();
            }
        });
    }
    /// Name -> detached parameter or buffer tensor (sharing storage), in
    /// name order: what PyTorch's `state_dict()` holds.
    fn state_dict(&self) -> BTreeMap<String, Tensor<B>> {
        self.named_parameters().into_iter().chain(self.named_buffers()).map(|(n, t)| (n, t.detach())).collect()
    }
    /// Loads values by name. Everything is validated before anything is
    /// written: with [`LoadOptions::strict`], any missing or unexpected key is
    /// an error; shape mismatches always are, dtype mismatches unless
    /// [`LoadOptions::convert_dtype`].
    /// On error the model is unchanged and the message lists every problem;
    /// on success the report lists what non-strict loading skipped.
    fn load_state_dict(&mut self, state: &BTreeMap<String, Tensor<B>>, options: LoadOptions) -> Result<LoadReport> {
        let LoadOptions { strict, convert_dtype, prefix } = options;
        let stripped: BTreeMap<String, Tensor<B>>;
        let mut outside = Vec::new();
        let state = match prefix.as_deref().filter(|p| !p.is_empty()) {
            None => state,
            Some(p) => {
                // Entries outside the prefix are unexpected, under their full names.
                stripped = state.iter().filter_map(|(k, t)| Some((k.strip_prefix(p)?.to_string(), t.clone()))).collect();
                outside.extend(state.keys().filter(|k| !k.starts_with(p)).cloned());
                &stripped
            }
        };
        let params: Vec<(String, Tensor<B>)> = self.named_parameters().into_iter().chain(self.named_buffers()).collect();
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
        report.unexpected.extend(outside);
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
        self.load_state_dict(&sd, LoadOptions { strict: true, convert_dtype: true, prefix: None })
            .map(|_| ())
            .map_err(|e| Error::Format(format!("{}: {e}", path.as_ref().display())))
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

/// The same helpers on a trait object of any lifetime (`Box<dyn Module<B>>`,
/// `Arc<dyn Module<B>>`, and a `&dyn Module<B>` parameter, whose object
/// lifetime is the borrow's, not `'static`).
///
/// ```
/// use autograd_nn::{LinearConfig, Module, ModuleExt};
/// use autograd_core::{Backend, RefBackend};
/// fn count<B: Backend>(m: &dyn Module<B>) -> usize {
///     m.named_parameters().len()
/// }
/// assert_eq!(count(&LinearConfig::new(2, 3).init::<RefBackend>()), 2);
/// ```
impl<'a, B: Backend> ModuleExt<B> for dyn Module<B> + 'a {
    fn as_dyn(&self) -> &dyn Module<B> {
        self
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module<B> {
        self
    }
}
