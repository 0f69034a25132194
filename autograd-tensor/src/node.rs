//! Graph nodes: what the engine walks backwards.
//!
//! Each non-leaf tensor points at the [`Node`] that made it; each node points
//! at the nodes (or leaves) of its inputs (`next_functions`) and owns the
//! tensors its backward formula needs. Leaves appear as `AccumulateGrad`.

use crate::Tensor;
use crate::deferred_drop::defer_drop;
use autograd_core::{Backend, Error, Result};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);
static LIVE_NODES: AtomicUsize = AtomicUsize::new(0);

/// Number of graph nodes alive in the process (for leak tests and diagnostics).
pub fn live_nodes() -> usize {
    LIVE_NODES.load(Ordering::Relaxed)
}

/// The backward half of a differentiable op.
///
/// `backward` receives the gradient of the op's output and returns one
/// optional gradient per input, in input order. It is written with
/// differentiable [`Tensor`] ops, so running it with grad mode on
/// (`create_graph`) records the graph of the gradient itself.
pub trait BackwardOp<B: Backend>: Send + Sync {
    /// Gradients of the inputs given the gradient of the output.
    fn backward(&self, ctx: &BackwardCtx<'_, B>, grad: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>>;
    /// Whether this op keeps tensors alive for its backward. Ops that do are
    /// freed after a backward without `retain_graph`; ops that keep nothing
    /// can be run again, as in PyTorch.
    fn saves_tensors(&self) -> bool {
        true
    }
}

/// What a running backward op may ask of the engine.
pub struct BackwardCtx<'a, B: Backend> {
    pub(crate) node: &'a Arc<Node<B>>,
}

impl<B: Backend> BackwardCtx<'_, B> {
    /// The op's own output, saved detached (so the node does not own its
    /// output and no cycle forms). Under `create_graph` it is re-attached to
    /// this node, so gradients of gradients flow through it, as PyTorch does
    /// when it unpacks a saved output.
    pub fn output(&self, saved: &Tensor<B>) -> Tensor<B> {
        if crate::grad_mode::is_grad_enabled() {
            Tensor::from_parts(saved.inner.storage.clone(), saved.layout().clone(), saved.dtype(), Some(self.node.clone()), true)
        } else {
            saved.clone()
        }
    }
    /// The name of the running node.
    pub fn name(&self) -> &'static str {
        self.node.name
    }
}

/// Where a node sends an input's gradient.
pub(crate) enum Edge<B: Backend> {
    /// The input needs no gradient.
    None,
    /// The input was made by another node.
    Node(Arc<Node<B>>),
    /// The input is a leaf that requires grad (PyTorch's `AccumulateGrad`).
    Leaf(Tensor<B>),
}

/// A node's edges, stored inline up to two (unary and binary ops).
pub(crate) type Edges<B> = smallvec::SmallVec<[Edge<B>; 2]>;

/// One recorded op in the graph.
pub struct Node<B: Backend> {
    pub(crate) name: &'static str,
    pub(crate) op: Mutex<Option<Box<dyn BackwardOp<B>>>>,
    pub(crate) next: Edges<B>,
    pub(crate) location: &'static Location<'static>,
    pub(crate) seq: u64,
    /// Non-leaf tensors that asked for `retain_grad` (weak: no cycle).
    pub(crate) retained: Mutex<Option<std::sync::Weak<crate::tensor::TensorImpl<B>>>>,
    /// Hooks registered on the output tensor, run on its gradient before the node.
    pub(crate) pre_hooks: std::sync::OnceLock<Arc<crate::hooks::HookList<crate::hooks::GradHook<B>>>>,
}

impl<B: Backend> Node<B> {
    pub(crate) fn new(name: &'static str, op: Box<dyn BackwardOp<B>>, next: Edges<B>, location: &'static Location<'static>) -> Self {
        LIVE_NODES.fetch_add(1, Ordering::Relaxed);
        Node {
            name,
            op: Mutex::new(Some(op)),
            next,
            location,
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            retained: Mutex::new(None),
            pre_hooks: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn freed_error(&self) -> Error {
        Error::Autograd(format!(
            "Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed): \
             {} (created at {}:{}) has already released its saved tensors. Saved intermediate values of the graph are freed when you \
             call backward() or autograd::grad(). Pass retain_graph = true to the first backward if you need to backward through the \
             graph a second time.",
            self.name,
            self.location.file(),
            self.location.line()
        ))
    }
}

impl<B: Backend> Drop for Node<B> {
    fn drop(&mut self) {
        LIVE_NODES.fetch_sub(1, Ordering::Relaxed);
        for e in std::mem::take(&mut self.next) {
            if let Edge::Node(n) = e {
                defer_node_drop(n);
            }
        }
        if let Some(op) = self.op.get_mut().ok().and_then(|o| o.take()) {
            defer_drop(op);
        }
    }
}

/// Drops a node handle without recursing when it is the last one.
pub(crate) fn defer_node_drop<B: Backend>(n: Arc<Node<B>>) {
    if Arc::strong_count(&n) == 1 {
        crate::deferred_drop::defer_drop_arc(n);
    } else {
        drop(n);
    }
}

/// A public handle on a graph node, as `tensor.grad_fn()` returns it.
///
/// ```
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let a = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = (&a * &a).tanh();
/// let f = y.grad_fn().unwrap();
/// assert_eq!(f.name(), "TanhBackward0");
/// let next = f.next_functions();
/// assert_eq!(next[0].as_ref().unwrap().name(), "MulBackward0");
/// ```
pub enum GradFn<B: Backend> {
    /// An op node.
    Node(Arc<Node<B>>),
    /// The gradient sink of a leaf tensor.
    AccumulateGrad(Tensor<B>),
}

impl<B: Backend> Clone for GradFn<B> {
    fn clone(&self) -> Self {
        match self {
            GradFn::Node(n) => GradFn::Node(n.clone()),
            GradFn::AccumulateGrad(t) => GradFn::AccumulateGrad(t.clone()),
        }
    }
}

impl<B: Backend> GradFn<B> {
    /// The node's name as PyTorch prints it (`MulBackward0`, `AccumulateGrad`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            GradFn::Node(n) => n.name,
            GradFn::AccumulateGrad(_) => "AccumulateGrad",
        }
    }
    /// The nodes the gradient flows to next, one per input (`None` where the
    /// input needs no gradient).
    pub fn next_functions(&self) -> Vec<Option<GradFn<B>>> {
        match self {
            GradFn::Node(n) => n
                .next
                .iter()
                .map(|e| match e {
                    Edge::None => None,
                    Edge::Node(n) => Some(GradFn::Node(n.clone())),
                    Edge::Leaf(t) => Some(GradFn::AccumulateGrad(t.clone())),
                })
                .collect(),
            GradFn::AccumulateGrad(_) => Vec::new(),
        }
    }
    /// Source location of the forward call that created the node.
    pub fn location(&self) -> Option<&'static Location<'static>> {
        match self {
            GradFn::Node(n) => Some(n.location),
            GradFn::AccumulateGrad(_) => None,
        }
    }
    /// For `AccumulateGrad`, the leaf tensor it accumulates into.
    pub fn variable(&self) -> Option<&Tensor<B>> {
        match self {
            GradFn::AccumulateGrad(t) => Some(t),
            GradFn::Node(_) => None,
        }
    }
    /// A stable identity for graph walks (two handles on one node compare equal).
    pub fn id(&self) -> usize {
        match self {
            GradFn::Node(n) => Arc::as_ptr(n) as *const u8 as usize,
            GradFn::AccumulateGrad(t) => t.id(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for GradFn<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{}>", self.name())
    }
}

/// A tensor saved for backward, with the version it had when saved; or,
/// under [`crate::SavedTensorHooks`], whatever the hooks packed it into.
pub struct SavedTensor<B: Backend> {
    inner: Saved<B>,
}

enum Saved<B: Backend> {
    Kept { tensor: Tensor<B>, version: u64 },
    Packed { hooks: Arc<dyn crate::SavedTensorHooks<B>>, packed: crate::PackedTensor },
}

impl<B: Backend> SavedTensor<B> {
    /// Saves `t` (sharing its storage), or hands it to the innermost saved-tensor hooks.
    pub fn new(t: &Tensor<B>) -> Self {
        let inner = match crate::saved_hooks::current::<B>() {
            Some(hooks) => Saved::Packed { packed: hooks.pack(t), hooks },
            None => Saved::Kept { tensor: t.clone(), version: t.version() },
        };
        SavedTensor { inner }
    }
    /// The saved tensor, or an error if it was modified in place since (or
    /// if the hooks could not give it back).
    pub fn get(&self, node: &'static str) -> Result<Tensor<B>> {
        match &self.inner {
            Saved::Kept { tensor, version } => {
                let now = tensor.version();
                if now != *version {
                    return Err(Error::Autograd(format!(
                        "one of the variables needed for gradient computation has been modified by an inplace operation: \
                         a tensor of shape {:?} saved by {node} is at version {now}; expected version {version} instead. \
                         Clone the tensor before modifying it in place, or modify it after backward.",
                        tensor.shape(),
                    )));
                }
                Ok(tensor.clone())
            }
            Saved::Packed { hooks, packed } => hooks.unpack(packed).map_err(|e| match e {
                Error::Autograd(m) => Error::Autograd(format!("{node}: {m}")),
                other => other,
            }),
        }
    }
}
