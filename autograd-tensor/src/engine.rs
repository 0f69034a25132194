//! The reverse-mode engine.
//!
//! The whole idea, as in micrograd: walk the graph from the output, count for
//! every node how many consumers will send it a gradient, then run nodes in
//! an order where each one has received all of its gradient (sum over
//! paths) before its backward runs. Leaves add what reaches them into
//! `.grad`. Everything is iterative: graph depth never touches the stack.

use crate::anomaly::is_anomaly_enabled;
use crate::deferred_drop::defer_drop;
use crate::grad_mode::set_grad_enabled;
use crate::node::{BackwardCtx, Edge, Node};
use crate::tensor::tensor_from_weak;
use crate::Tensor;
use autograd_core::{Backend, Error, Result};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

type NodeKey = usize;

/// A node ready to run, ordered by creation so that, like PyTorch, the most
/// recently created ready node runs first.
struct Ready<B: Backend>(Arc<Node<B>>);
impl<B: Backend> PartialEq for Ready<B> {
    fn eq(&self, o: &Self) -> bool {
        self.0.seq == o.0.seq
    }
}
impl<B: Backend> Eq for Ready<B> {}
impl<B: Backend> PartialOrd for Ready<B> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<B: Backend> Ord for Ready<B> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.seq.cmp(&o.0.seq)
    }
}

fn key<B: Backend>(n: &Arc<Node<B>>) -> NodeKey {
    Arc::as_ptr(n) as *const u8 as usize
}

/// Restores grad mode on drop (the engine enables it only for `create_graph`).
struct ModeGuard(bool);
impl Drop for ModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.0);
    }
}

/// What `grad()` should return instead of accumulating into leaves.
struct Capture {
    by_leaf: HashMap<usize, usize>,
    by_node: HashMap<NodeKey, usize>,
}

/// Runs the backward pass from `roots` (tensor, gradient) pairs.
/// With `capture`, gradients of those tensors are returned and no `.grad` is touched.
pub(crate) fn run_backward<B: Backend>(
    roots: &[(Tensor<B>, Tensor<B>)],
    retain_graph: bool,
    create_graph: bool,
    capture: Option<&[Tensor<B>]>,
) -> Result<Vec<Option<Tensor<B>>>> {
    let _span = tracing::debug_span!("backward", roots = roots.len(), retain_graph, create_graph).entered();
    let _mode = ModeGuard(set_grad_enabled(create_graph));
    let n_capture = capture.map_or(0, |c| c.len());
    let mut results: Vec<Option<Tensor<B>>> = vec![None; n_capture];
    let cap = capture.map(|inputs| {
        let mut c = Capture { by_leaf: HashMap::default(), by_node: HashMap::default() };
        for (i, t) in inputs.iter().enumerate() {
            match t.node() {
                Some(n) => c.by_node.insert(key(n), i),
                None => c.by_leaf.insert(t.id(), i),
            };
        }
        c
    });

    for (i, (t, g)) in roots.iter().enumerate() {
        if !t.requires_grad() {
            return Err(Error::Autograd(format!(
                "element {i} of tensors does not require grad and does not have a grad_fn: call requires_grad_(true) on a leaf it depends on"
            )));
        }
        if g.shape() != t.shape() {
            return Err(Error::Autograd(format!(
                "grad must have the shape of the tensor: got gradient of shape {:?} for a tensor of shape {:?}",
                g.shape(),
                t.shape()
            )));
        }
    }

    // 1. Dependency counts over the reachable graph.
    let mut deps: HashMap<NodeKey, usize> = HashMap::default();
    let mut stack: Vec<Arc<Node<B>>> = Vec::new();
    for (t, _) in roots {
        if let Some(n) = t.node() {
            if let std::collections::hash_map::Entry::Vacant(e) = deps.entry(key(n)) {
                e.insert(0);
                stack.push(n.clone());
            }
        }
    }
    while let Some(n) = stack.pop() {
        for e in &n.next {
            if let Edge::Node(c) = e {
                let d = deps.entry(key(c)).or_insert(0);
                if *d == 0 {
                    stack.push(c.clone());
                }
                *d += 1;
            }
        }
    }

    // 2. Seed the roots.
    let mut buffers: HashMap<NodeKey, Tensor<B>> = HashMap::with_capacity_and_hasher(deps.len(), Default::default());
    let mut ready: std::collections::BinaryHeap<Ready<B>> = std::collections::BinaryHeap::new();
    for (t, g) in roots {
        match t.node() {
            Some(n) => {
                let k = key(n);
                let g = match buffers.remove(&k) {
                    Some(prev) => prev.try_add(g)?,
                    None => g.clone(),
                };
                buffers.insert(k, g);
                if deps[&k] == 0 && !ready.iter().any(|r| key(&r.0) == k) {
                    ready.push(Ready(n.clone()));
                }
            }
            None => deliver_leaf(t, g.clone(), &cap, &mut results, create_graph)?,
        }
    }

    // 3. Run nodes whose gradient is complete.
    while let Some(Ready(node)) = ready.pop() {
        let k = key(&node);
        let grad = match (buffers.remove(&k), node.pre_hooks.get()) {
            (Some(g), Some(h)) => Some(h.apply(g)),
            (g, _) => g,
        };
        let grads: Vec<Option<Tensor<B>>> = match &grad {
            None => vec![None; node.next.len()],
            Some(grad) => {
                if let Some(w) = node.retained.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    if let Some(t) = tensor_from_weak(w) {
                        accumulate_into(&t, grad.clone(), create_graph)?;
                    }
                }
                if let Some(c) = &cap {
                    if let Some(&i) = c.by_node.get(&k) {
                        results[i] = Some(match results[i].take() {
                            Some(prev) => prev.try_add(grad)?,
                            None => grad.clone(),
                        });
                    }
                }
                let _s = tracing::trace_span!("node", name = node.name, shape = ?grad.dims()).entered();
                let mut slot = node.op.lock().unwrap_or_else(|e| e.into_inner());
                let op = slot.as_ref().ok_or_else(|| node.freed_error())?;
                let out = op.backward(&BackwardCtx { node: &node }, grad)?;
                if is_anomaly_enabled() {
                    check_finite(&node, &out)?;
                }
                if !retain_graph && op.saves_tensors() {
                    if let Some(op) = slot.take() {
                        drop(slot);
                        defer_drop(op);
                    }
                }
                if out.len() != node.next.len() {
                    return Err(Error::Autograd(format!("{} returned {} gradients for {} inputs", node.name, out.len(), node.next.len())));
                }
                out
            }
        };
        // This node's input gradient is done with: free it before handing
        // the outputs on, so a view of it (a transpose's gradient) reaches a
        // leaf unshared and is stored without a copy.
        drop(grad);
        for (e, g) in node.next.iter().zip(grads) {
            match e {
                Edge::None => {}
                Edge::Leaf(t) => {
                    if let Some(g) = g {
                        deliver_leaf(t, g, &cap, &mut results, create_graph)?;
                    }
                }
                Edge::Node(c) => {
                    let ck = key(c);
                    if let Some(g) = g {
                        let g = match buffers.remove(&ck) {
                            Some(prev) => prev.try_add(&g)?,
                            None => g,
                        };
                        buffers.insert(ck, g);
                    }
                    let d = deps.get_mut(&ck).expect("dependency counted");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(Ready(c.clone()));
                    }
                }
            }
        }
    }
    Ok(results)
}

/// Anomaly mode: NaN or Inf in a node's output gradients is an error that
/// points at the forward op.
fn check_finite<B: Backend>(node: &Node<B>, grads: &[Option<Tensor<B>>]) -> Result<()> {
    for (i, g) in grads.iter().enumerate() {
        let Some(g) = g else { continue };
        let v = g.to_vec_f64();
        if let Some(bad) = v.iter().find(|x| !x.is_finite()) {
            return Err(Error::Autograd(format!(
                "anomaly detected: function '{}' returned {} values in its {i}th output; the forward op that created it was called at {}:{}:{}",
                node.name,
                if bad.is_nan() { "nan" } else { "inf" },
                node.location.file(),
                node.location.line(),
                node.location.column()
            )));
        }
    }
    Ok(())
}

fn deliver_leaf<B: Backend>(
    t: &Tensor<B>,
    g: Tensor<B>,
    cap: &Option<Capture>,
    results: &mut [Option<Tensor<B>>],
    create_graph: bool,
) -> Result<()> {
    let hooks = t.inner.hooks.get();
    let g = match hooks {
        Some(h) if !h.pre.is_empty() => h.pre.apply(g),
        _ => g,
    };
    match cap {
        Some(c) => {
            if let Some(&i) = c.by_leaf.get(&t.id()) {
                results[i] = Some(match results[i].take() {
                    Some(prev) => prev.try_add(&g)?,
                    None => g,
                });
            }
            Ok(())
        }
        None => {
            accumulate_into(t, g, create_graph)?;
            if let Some(h) = hooks {
                for (_, hook) in h.post.hooks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    hook(t);
                }
            }
            Ok(())
        }
    }
}

/// `t.grad += g`, PyTorch's AccumulateGrad.
fn accumulate_into<B: Backend>(t: &Tensor<B>, g: Tensor<B>, create_graph: bool) -> Result<()> {
    if g.shape() != t.shape() {
        return Err(Error::Autograd(format!(
            "gradient of shape {:?} cannot be accumulated into a tensor of shape {:?}",
            g.shape(),
            t.shape()
        )));
    }
    // Detach, and let go of the attached handle at once (a shadowed binding
    // would live to the end of the function and make the storage look shared).
    let g = if create_graph {
        g
    } else {
        let d = g.detach();
        drop(g);
        d
    };
    let mut slot = t.inner.grad.lock().unwrap_or_else(|e| e.into_inner());
    let new = match slot.take() {
        // The gradient may be a view or shared with another consumer (an
        // add passes one tensor to both inputs): own a private copy so that
        // later in-place updates of `.grad` touch nothing else.
        None if !create_graph && (!g.is_contiguous() || Arc::strong_count(&g.inner.storage) > 1 || Arc::strong_count(&g.inner) > 1) => {
            g.try_contiguous_copy()?
        }
        None => g,
        Some(prev) => prev.try_add(&g)?,
    };
    *slot = Some(new);
    Ok(())
}

impl<B: Backend> Tensor<B> {
    /// Computes the gradient of this scalar with respect to every leaf that
    /// requires grad, adding it into their `.grad()`. Frees the graph's saved
    /// tensors; a second call through the same graph is an `Err`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::scalar(3.0f64).requires_grad_(true);
    /// let y = &x * &x + &x;
    /// y.backward().unwrap();
    /// assert_eq!(x.grad().unwrap().item(), 7.0);
    /// assert!(y.backward().is_err()); // the graph was freed
    /// ```
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false, false)
    }

    /// Backward with an explicit upstream gradient (required for non-scalar
    /// outputs), `retain_graph` (keep saved tensors for another backward)
    /// and `create_graph` (record the backward pass for higher-order
    /// gradients).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    /// let y = &x * 3.0;
    /// assert!(y.backward().is_err()); // not a scalar
    /// y.backward_with(Some(&Tensor::ones([2], autograd_core::DType::F64)), false, false).unwrap();
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![3.0, 3.0]);
    /// ```
    pub fn backward_with(&self, grad: Option<&Tensor<B>>, retain_graph: bool, create_graph: bool) -> Result<()> {
        let g = match grad {
            Some(g) => g.clone(),
            None => {
                if self.numel() != 1 {
                    return Err(Error::Autograd(format!(
                        "grad can be implicitly created only for scalar outputs (this tensor has shape {:?}); pass a gradient to backward_with",
                        self.shape()
                    )));
                }
                Tensor::ones(self.shape().clone(), self.dtype())
            }
        };
        run_backward(&[(self.clone(), g)], retain_graph, create_graph, None).map(|_| ())
    }
}

/// Gradients of `outputs` with respect to `inputs`, returned instead of
/// accumulated (PyTorch's `torch.autograd.grad`).
///
/// `grad_outputs` defaults to ones for scalar outputs. With `create_graph`
/// the returned gradients carry a graph and can be differentiated again.
/// An input that does not influence the outputs is an `Err` unless
/// `allow_unused`, in which case its entry is `None`.
///
/// ```
/// use autograd_tensor::{Tensor, autograd};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = x.powf(3.0);
/// let g = autograd::grad(&[y], &[x.clone()], None, false, true, false).unwrap();
/// let dy = g[0].clone().unwrap();
/// assert_eq!(dy.item(), 12.0);
/// let g2 = autograd::grad(&[dy], &[x.clone()], None, false, false, false).unwrap();
/// assert_eq!(g2[0].as_ref().unwrap().item(), 12.0); // 6x
/// assert!(x.grad().is_none());
/// ```
pub fn grad<B: Backend>(
    outputs: &[Tensor<B>],
    inputs: &[Tensor<B>],
    grad_outputs: Option<&[Tensor<B>]>,
    retain_graph: bool,
    create_graph: bool,
    allow_unused: bool,
) -> Result<Vec<Option<Tensor<B>>>> {
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        let g = match grad_outputs.and_then(|g| g.get(i)) {
            Some(g) => g.clone(),
            None if o.numel() == 1 => Tensor::ones(o.shape().clone(), o.dtype()),
            None => {
                return Err(Error::Autograd(format!(
                    "grad can be implicitly created only for scalar outputs (output {i} has shape {:?}); pass grad_outputs",
                    o.shape()
                )))
            }
        };
        roots.push((o.clone(), g));
    }
    for (i, t) in inputs.iter().enumerate() {
        if !t.requires_grad() {
            return Err(Error::Autograd(format!("input {i} of autograd::grad does not require grad")));
        }
    }
    let res = run_backward(&roots, retain_graph || create_graph, create_graph, Some(inputs))?;
    if !allow_unused {
        if let Some(i) = res.iter().position(|r| r.is_none()) {
            return Err(Error::Autograd(format!(
                "one of the differentiated tensors (input {i}) appears to not have been used in the graph; pass allow_unused = true if this is expected"
            )));
        }
    }
    Ok(res)
}
