//! A tensor's autograd metadata (PyTorch's `AutogradMeta`): whether it
//! requires grad, the node that made it, its accumulated gradient, the
//! hooks of a leaf and a forward-mode tangent, with the `Tensor` methods
//! that read and set them. The handle itself is `tensor.rs`'s.

use crate::Tensor;
use crate::deferred_drop::defer_drop;
use crate::hooks::{GradHook, HookList, PostAccumulateHook, RemovableHandle};
use crate::node::{GradFn, Node, defer_node_drop};
use autograd_core::{Backend, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The autograd half of a tensor.
pub(crate) struct AutogradMeta<B: Backend> {
    /// The node that made the tensor (`None` for a leaf).
    pub(crate) grad_fn: Option<Arc<Node<B>>>,
    pub(crate) requires_grad: AtomicBool,
    /// The accumulated gradient (`.grad`).
    pub(crate) grad: Mutex<Option<Tensor<B>>>,
    /// Hooks of a leaf (a non-leaf keeps them on its node); allocated on first use.
    pub(crate) hooks: OnceLock<LeafHooks<B>>,
    /// Forward-mode tangent (dual part), set when the tensor is created.
    pub(crate) tangent: OnceLock<Tensor<B>>,
}

pub(crate) struct LeafHooks<B: Backend> {
    pub(crate) pre: Arc<HookList<GradHook<B>>>,
    pub(crate) post: Arc<HookList<PostAccumulateHook<B>>>,
}

impl<B: Backend> AutogradMeta<B> {
    pub(crate) fn new(grad_fn: Option<Arc<Node<B>>>, requires_grad: bool) -> Self {
        AutogradMeta {
            grad_fn,
            requires_grad: AtomicBool::new(requires_grad),
            grad: Mutex::new(None),
            hooks: OnceLock::new(),
            tangent: OnceLock::new(),
        }
    }
}

impl<B: Backend> Drop for AutogradMeta<B> {
    /// A long chain of nodes (or of gradients' nodes) is freed iteratively,
    /// not by recursion on the stack.
    fn drop(&mut self) {
        if let Some(f) = self.grad_fn.take() {
            defer_node_drop(f);
        }
        if let Some(g) = self.grad.get_mut().ok().and_then(|g| g.take()) {
            defer_drop(g);
        }
    }
}

impl<B: Backend> Tensor<B> {
    /// Whether gradients flow to or through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.inner.autograd.requires_grad.load(Ordering::Relaxed)
    }
    /// Sets `requires_grad` on a leaf and returns the tensor (builder style,
    /// like PyTorch's `requires_grad_()`). Panics for non-float dtypes and
    /// for turning it off on a non-leaf; see [`Tensor::try_requires_grad_`].
    #[track_caller]
    pub fn requires_grad_(self, on: bool) -> Self {
        autograd_core::ResultExt::or_panic(self.try_requires_grad_(on))
    }
    /// Fallible [`Tensor::requires_grad_`].
    pub fn try_requires_grad_(self, on: bool) -> Result<Self> {
        if on && self.inner.inference && !crate::grad_mode::is_inference_mode() {
            return Err(Error::Autograd(
                "setting requires_grad on a tensor created in inference_mode is not allowed: it carries no version counter; make a copy with deep_clone() outside inference mode".into(),
            ));
        }
        if on && !self.dtype().is_float() {
            return Err(Error::Autograd(format!("only tensors of floating point dtype can require gradients (got {:?})", self.dtype())));
        }
        if !self.is_leaf() {
            if on {
                return Ok(self);
            }
            return Err(Error::Autograd(
                "you can only change requires_grad flags of leaf variables; use detach() to get a tensor that does not require grad".into(),
            ));
        }
        self.inner.autograd.requires_grad.store(on, Ordering::Relaxed);
        Ok(self)
    }
    /// True for tensors not produced by a recorded op.
    pub fn is_leaf(&self) -> bool {
        self.inner.autograd.grad_fn.is_none()
    }
    /// The accumulated gradient, if any.
    pub fn grad(&self) -> Option<Tensor<B>> {
        self.inner.autograd.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Replaces the gradient (`None` clears it, like `zero_grad(set_to_none=True)`).
    pub fn set_grad(&self, grad: Option<Tensor<B>>) {
        *self.inner.autograd.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad;
    }
    /// Clears the gradient as `zero_grad` does for one tensor: drops it with
    /// `set_to_none` (the next backward writes a fresh one), zeros it in
    /// place otherwise (outside the graph, so views of it stay valid).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::scalar(3.0f64).requires_grad_(true);
    /// (&x * &x).backward().unwrap();
    /// x.clear_grad(false);
    /// assert_eq!(x.grad().unwrap().item(), 0.0);
    /// x.clear_grad(true);
    /// assert!(x.grad().is_none());
    /// ```
    pub fn clear_grad(&self, set_to_none: bool) {
        match self.grad() {
            Some(g) if !set_to_none => crate::grad_mode::no_grad(|| g.zero_()),
            _ => self.set_grad(None),
        }
    }
    /// The node that produced this tensor (`None` for leaves).
    pub fn grad_fn(&self) -> Option<GradFn<B>> {
        self.inner.autograd.grad_fn.as_ref().map(|n| GradFn::Node(n.clone()))
    }
    pub(crate) fn node(&self) -> Option<&Arc<Node<B>>> {
        self.inner.autograd.grad_fn.as_ref()
    }
    /// Asks a non-leaf tensor to keep its gradient in `.grad()` after backward.
    pub fn retain_grad(&self) {
        if let Some(n) = &self.inner.autograd.grad_fn {
            *n.retained.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(&self.inner));
        }
    }
    /// Registers a hook run on this tensor's gradient each time one is
    /// computed; it may return a replacement. Leaves run it before the
    /// gradient is accumulated, non-leaves before their node runs.
    #[track_caller]
    pub fn register_hook(&self, hook: impl Fn(&Tensor<B>) -> Option<Tensor<B>> + Send + Sync + 'static) -> RemovableHandle {
        autograd_core::ResultExt::or_panic(self.try_register_hook(hook))
    }

    /// Fallible [`Tensor::register_hook`]: `Err` on a tensor that does not require grad.
    pub fn try_register_hook(&self, hook: impl Fn(&Tensor<B>) -> Option<Tensor<B>> + Send + Sync + 'static) -> Result<RemovableHandle> {
        if !self.requires_grad() {
            return Err(Error::Autograd("cannot register a hook on a tensor that doesn't require gradient".into()));
        }
        Ok(match &self.inner.autograd.grad_fn {
            Some(n) => n.pre_hooks.get_or_init(Default::default).add(Box::new(hook)),
            None => self.leaf_hooks().pre.add(Box::new(hook)),
        })
    }

    /// Registers a hook run on a leaf after its `.grad` was updated (it receives the leaf).
    pub fn register_post_accumulate_grad_hook(&self, hook: impl Fn(&Tensor<B>) + Send + Sync + 'static) -> Result<RemovableHandle> {
        if !self.is_leaf() || !self.requires_grad() {
            return Err(Error::Autograd("post accumulate grad hooks can only be registered on leaf tensors that require grad".into()));
        }
        Ok(self.leaf_hooks().post.add(Box::new(hook)))
    }

    pub(crate) fn leaf_hooks(&self) -> &LeafHooks<B> {
        self.inner.autograd.hooks.get_or_init(|| LeafHooks { pre: Default::default(), post: Default::default() })
    }

    /// The forward-mode tangent carried by this tensor, if any.
    pub fn tangent(&self) -> Option<Tensor<B>> {
        self.inner.autograd.tangent.get().cloned()
    }

    /// A dual tensor: `primal` (shared storage, same graph) carrying `tangent`
    /// for forward-mode AD; ops on it propagate the tangent with their JVP rules.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::make_dual(&Tensor::scalar(2.0f64), &Tensor::scalar(1.0f64)).unwrap();
    /// let y = &x * &x * &x;
    /// assert_eq!(y.tangent().unwrap().item(), 12.0); // d(x^3)/dx at 2
    /// ```
    pub fn make_dual(primal: &Tensor<B>, tangent: &Tensor<B>) -> Result<Tensor<B>> {
        if primal.shape() != tangent.shape() {
            return Err(Error::shape_mismatch("make_dual", primal.shape(), tangent.shape(), None));
        }
        let t = Self::from_parts(
            primal.inner.storage.clone(),
            primal.layout().clone(),
            primal.dtype(),
            primal.inner.autograd.grad_fn.clone(),
            primal.requires_grad(),
        );
        let _ = t.inner.autograd.tangent.set(tangent.try_to_dtype(primal.dtype())?);
        Ok(t)
    }

    /// Whether this tensor was created in inference mode.
    pub fn is_inference(&self) -> bool {
        self.inner.inference
    }

    /// The storage's version counter (bumped by in-place ops).
    pub fn version(&self) -> u64 {
        self.inner.storage.version.load(Ordering::Relaxed)
    }
    /// A tensor sharing this one's storage, cut from the graph.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::scalar(3.0f64).requires_grad_(true);
    /// let out = (&x * &x).detach() * &x;
    /// out.backward().unwrap();
    /// assert_eq!(x.grad().unwrap().item(), 9.0);
    /// ```
    pub fn detach(&self) -> Tensor<B> {
        Self::from_parts(self.inner.storage.clone(), self.inner.layout.clone(), self.dtype(), None, false)
    }
}
