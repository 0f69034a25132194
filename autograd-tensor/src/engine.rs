//! The reverse-mode engine.
//!
//! The whole idea, as in micrograd: walk the graph from the outputs, count
//! for every vertex how many consumers will send it a gradient, then run
//! vertices in an order where each has received all of its gradient (the sum
//! over paths) before it runs. A vertex is a function node (its backward
//! turns one gradient into one per input) or a sink, PyTorch's
//! `AccumulateGrad`: a leaf, which adds what reaches it into `.grad` or, for
//! `autograd::grad`, into the returned slot. `retain_grad` and `grad()`'s
//! capture of a non-leaf are sinks attached to the node that made the tensor.
//! Everything is iterative: graph depth never touches the stack.
//!
//! `autograd::grad` prunes first (tinygrad's `_deepwalk`, PyTorch's
//! `exec_info_`): only vertices on a path to a requested input run.

use crate::Tensor;
use crate::anomaly::is_anomaly_enabled;
use crate::callbacks::CallbackFrame;
use crate::deferred_drop::defer_drop;
use crate::grad_mode::set_grad_enabled;
use crate::node::{BackwardCtx, Edge, Node};
use crate::tensor::tensor_from_weak;
use autograd_core::{Backend, Error, Result};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BinaryHeap;
use std::sync::Arc;

/// A vertex of the backward graph: a function node or a leaf (a sink).
enum Vertex<B: Backend> {
    Node(Arc<Node<B>>),
    Leaf(Tensor<B>),
}

impl<B: Backend> Clone for Vertex<B> {
    fn clone(&self) -> Self {
        match self {
            Vertex::Node(n) => Vertex::Node(n.clone()),
            Vertex::Leaf(t) => Vertex::Leaf(t.clone()),
        }
    }
}

/// Identity of a vertex: a node's or a leaf's allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Node(usize),
    Leaf(usize),
}

impl<B: Backend> Vertex<B> {
    fn of_edge(e: &Edge<B>) -> Option<Vertex<B>> {
        match e {
            Edge::None => None,
            Edge::Node(n) => Some(Vertex::Node(n.clone())),
            Edge::Leaf(t) => Some(Vertex::Leaf(t.clone())),
        }
    }
    fn of_tensor(t: &Tensor<B>) -> Vertex<B> {
        match t.node() {
            Some(n) => Vertex::Node(n.clone()),
            None => Vertex::Leaf(t.clone()),
        }
    }
    fn key(&self) -> Key {
        match self {
            Vertex::Node(n) => Key::Node(Arc::as_ptr(n) as *const u8 as usize),
            Vertex::Leaf(t) => Key::Leaf(t.id()),
        }
    }
    /// The key of an edge's target, without cloning a handle.
    fn key_of_edge(e: &Edge<B>) -> Option<Key> {
        match e {
            Edge::None => None,
            Edge::Node(n) => Some(Key::Node(Arc::as_ptr(n) as *const u8 as usize)),
            Edge::Leaf(t) => Some(Key::Leaf(t.id())),
        }
    }
    /// Like PyTorch: sinks run as soon as they are ready, then the most
    /// recently created ready node.
    fn priority(&self) -> u64 {
        match self {
            Vertex::Node(n) => n.seq,
            Vertex::Leaf(_) => u64::MAX,
        }
    }
    /// Where each input's gradient goes, in input order (a leaf has none).
    fn edges(&self) -> &[Edge<B>] {
        match self {
            Vertex::Node(n) => &n.next,
            Vertex::Leaf(_) => &[],
        }
    }
}

/// A vertex ready to run, ordered by [`Vertex::priority`].
struct Ready<B: Backend>(Vertex<B>);
impl<B: Backend> PartialEq for Ready<B> {
    fn eq(&self, o: &Self) -> bool {
        self.0.priority() == o.0.priority()
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
        self.0.priority().cmp(&o.0.priority())
    }
}

/// Restores grad mode on drop (the engine enables it only for `create_graph`).
struct ModeGuard(bool);
impl Drop for ModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.0);
    }
}

/// `autograd::grad`'s sinks: the slot of each requested input (by vertex),
/// and the gradients gathered so far.
type Capture<B> = (HashMap<Key, usize>, Vec<Option<Tensor<B>>>);

/// How one backward pass runs.
struct Pass<B: Backend> {
    retain_graph: bool,
    create_graph: bool,
    /// `None` for `backward()`.
    capture: Option<Capture<B>>,
}

/// Adds `g` into `slot` (PyTorch's input buffer).
fn accumulate<B: Backend>(slot: &mut Option<Tensor<B>>, g: Tensor<B>) -> Result<()> {
    *slot = Some(match slot.take() {
        Some(prev) => prev.try_add(&g)?,
        None => g,
    });
    Ok(())
}

/// Runs the backward pass from `roots` (tensor, gradient) pairs. With
/// `capture`, returns the gradients of those tensors and touches no `.grad`.
pub(crate) fn run_backward<B: Backend>(
    roots: &[(Tensor<B>, Tensor<B>)],
    retain_graph: bool,
    create_graph: bool,
    capture: Option<&[Tensor<B>]>,
) -> Result<Vec<Option<Tensor<B>>>> {
    let _span = tracing::debug_span!("backward", roots = roots.len(), retain_graph, create_graph).entered();
    let _mode = ModeGuard(set_grad_enabled(create_graph));
    // backward ops run in the dtypes their forward saw, outside autocast
    let _autocast = crate::autocast::AutocastGuard::new(None)?;
    check_roots(roots)?;
    let callbacks = CallbackFrame::open();
    let capture = capture.map(|inputs| {
        let slots = inputs.iter().enumerate().map(|(i, t)| (Vertex::of_tensor(t).key(), i)).collect();
        (slots, vec![None; inputs.len()])
    });
    let mut pass = Pass { retain_graph, create_graph, capture };

    // 1. The graph: every vertex reachable from the roots, and how many
    //    consumers send each a gradient (with their names when pruning).
    let starts: Vec<Vertex<B>> = roots.iter().map(|(t, _)| Vertex::of_tensor(t)).collect();
    let (mut deps, parents) = discover(&starts, pass.capture.is_some());
    // 2. Prune (grad() only): keep what lies on a path to a requested input,
    //    and count only the consumers that are kept.
    let keep = pass.capture.as_ref().map(|(slots, _)| on_paths_to(slots.keys(), &parents));
    let kept = |k: &Key| keep.as_ref().is_none_or(|s| s.contains(k));
    if keep.is_some() {
        for (k, d) in deps.iter_mut() {
            *d = parents.get(k).map_or(0, |ps| ps.iter().filter(|p| kept(p)).count());
        }
    }
    // 3. Seed the roots, then run vertices whose gradient is complete.
    let mut buffers: HashMap<Key, Option<Tensor<B>>> = HashMap::default();
    for (t, g) in roots {
        accumulate(buffers.entry(Vertex::of_tensor(t).key()).or_default(), g.clone())?;
    }
    let mut first: HashSet<Key> = HashSet::default(); // a vertex given twice as a root runs once
    let mut ready: BinaryHeap<Ready<B>> =
        starts.into_iter().filter(|v| deps[&v.key()] == 0 && kept(&v.key()) && first.insert(v.key())).map(Ready).collect();
    while let Some(Ready(v)) = ready.pop() {
        let grad = buffers.remove(&v.key()).flatten();
        let outs = match &v {
            Vertex::Leaf(t) => {
                pass.deliver_leaf(t, grad)?;
                Vec::new()
            }
            Vertex::Node(n) => pass.call_node(n, grad)?,
        };
        for (e, g) in v.edges().iter().zip(outs) {
            let Some(k) = Vertex::key_of_edge(e).filter(|k| kept(k)) else { continue };
            if let Some(g) = g {
                accumulate(buffers.entry(k).or_default(), g)?;
            }
            let d = deps.get_mut(&k).expect("dependency counted");
            *d -= 1;
            if *d == 0 {
                ready.push(Ready(Vertex::of_edge(e).expect("an edge with a key")));
            }
        }
    }
    callbacks.run()?;
    Ok(pass.capture.map(|(_, got)| got).unwrap_or_default())
}

fn check_roots<B: Backend>(roots: &[(Tensor<B>, Tensor<B>)]) -> Result<()> {
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
    Ok(())
}

/// Every vertex reachable from `starts` with its number of consumer edges
/// (a consumer that uses it twice counts twice), and, when asked, the
/// consumers themselves.
fn discover<B: Backend>(starts: &[Vertex<B>], with_parents: bool) -> (HashMap<Key, usize>, HashMap<Key, Vec<Key>>) {
    let mut deps: HashMap<Key, usize> = HashMap::default();
    let mut parents: HashMap<Key, Vec<Key>> = HashMap::default();
    let mut stack: Vec<Vertex<B>> = Vec::new();
    for v in starts {
        if let std::collections::hash_map::Entry::Vacant(e) = deps.entry(v.key()) {
            e.insert(0);
            stack.push(v.clone());
        }
    }
    while let Some(v) = stack.pop() {
        for c in v.edges().iter().filter_map(Vertex::of_edge) {
            if with_parents {
                parents.entry(c.key()).or_default().push(v.key());
            }
            let d = deps.entry(c.key()).or_insert(0);
            if *d == 0 {
                stack.push(c);
            }
            *d += 1;
        }
    }
    (deps, parents)
}

/// The vertices with a path to one of `targets`: the targets and, walking
/// consumer links upwards, everything that feeds them.
fn on_paths_to<'a>(targets: impl Iterator<Item = &'a Key>, parents: &HashMap<Key, Vec<Key>>) -> HashSet<Key> {
    let mut keep: HashSet<Key> = HashSet::default();
    let mut stack: Vec<Key> = targets.copied().collect();
    while let Some(k) = stack.pop() {
        if keep.insert(k) {
            stack.extend(parents.get(&k).into_iter().flatten().copied());
        }
    }
    keep
}

/// What to do instead of a tensor hook in a compiled step.
const HOOK_HINT: &str = "remove the hook, or write its effect as tensor ops in the step";

impl<B: Backend> Pass<B> {
    /// One function node: tensor pre-hooks, the sinks attached to its output
    /// (`retain_grad`, `grad()`'s capture), its backward, the anomaly check,
    /// the release of its saved tensors and the arity check (PyTorch's
    /// `call_function` + `validate_outputs`). No gradient reached it: none
    /// goes on.
    fn call_node(&mut self, node: &Arc<Node<B>>, grad: Option<Tensor<B>>) -> Result<Vec<Option<Tensor<B>>>> {
        let Some(grad) = grad else { return Ok(vec![None; node.next.len()]) };
        let grad = match node.pre_hooks.get() {
            Some(h) if !h.is_empty() => {
                crate::capture::refuse(&format!("a tensor hook on {}", node.name), HOOK_HINT, Some(node.location))?;
                h.apply(grad)
            }
            _ => grad,
        };
        if let Some(t) = node.retained.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(tensor_from_weak) {
            accumulate_grad(&t, grad.clone(), self.create_graph)?;
        }
        self.capture_into(Vertex::Node(node.clone()).key(), &grad)?;
        let _s = tracing::trace_span!("node", name = node.name, shape = ?grad.dims()).entered();
        let mut slot = node.op.lock().unwrap_or_else(|e| e.into_inner());
        let op = slot.as_ref().ok_or_else(|| node.freed_error())?;
        let out = op.backward(&BackwardCtx { node }, &grad)?;
        if is_anomaly_enabled() {
            check_finite(node, &out)?;
        }
        if !self.retain_graph
            && op.saves_tensors()
            && let Some(op) = slot.take()
        {
            drop(slot);
            defer_drop(op);
        }
        if out.len() != node.next.len() {
            return Err(Error::Autograd(format!("{} returned {} gradients for {} inputs", node.name, out.len(), node.next.len())));
        }
        // This node's gradient is done with: free it before handing the
        // outputs on, so a view of it (a transpose's gradient) reaches a
        // leaf unshared and is stored without a copy.
        drop(grad);
        Ok(out)
    }

    /// A leaf's sink (PyTorch's `AccumulateGrad`): its tensor pre-hooks, then
    /// `grad()`'s slot, or `.grad` and the post-accumulate hooks.
    fn deliver_leaf(&mut self, t: &Tensor<B>, grad: Option<Tensor<B>>) -> Result<()> {
        let Some(g) = grad else { return Ok(()) };
        let hooks = t.inner.autograd.hooks.get();
        if hooks.is_some_and(|h| !h.pre.is_empty() || !h.post.is_empty()) {
            crate::capture::refuse(&format!("a tensor hook on a leaf of shape {:?}", t.dims()), HOOK_HINT, None)?;
        }
        let g = match hooks {
            Some(h) if !h.pre.is_empty() => h.pre.apply(g),
            _ => g,
        };
        if self.capture.is_some() {
            return self.capture_into(Vertex::Leaf(t.clone()).key(), &g);
        }
        accumulate_grad(t, g, self.create_graph)?;
        if let Some(h) = hooks {
            for (_, hook) in h.post.hooks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                hook(t);
            }
        }
        Ok(())
    }

    /// `grad()`: adds `g` into the slot of the requested input `k`, if it is one.
    fn capture_into(&mut self, k: Key, g: &Tensor<B>) -> Result<()> {
        if let Some((slots, got)) = &mut self.capture
            && let Some(&i) = slots.get(&k)
        {
            accumulate(&mut got[i], g.clone())?;
        }
        Ok(())
    }
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

/// `t.grad += g`, PyTorch's AccumulateGrad.
fn accumulate_grad<B: Backend>(t: &Tensor<B>, g: Tensor<B>, create_graph: bool) -> Result<()> {
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
    let mut slot = t.inner.autograd.grad.lock().unwrap_or_else(|e| e.into_inner());
    let new = match slot.take() {
        // The gradient may be a view or shared with another consumer (an
        // add passes one tensor to both inputs): own a private copy so that
        // later in-place updates of `.grad` touch nothing else.
        None if !create_graph && (!g.is_contiguous() || Arc::strong_count(&g.inner.storage) > 1 || Arc::strong_count(&g.inner) > 1) => {
            g.try_deep_clone()?
        }
        None => g,
        // PyTorch's AccumulateGrad adds in place when not recording
        // (`variable_grad += new_grad`): a handle on `.grad` sees the sum,
        // and a compiled step's replay accumulates into the gradient the
        // parameter really holds.
        Some(prev) if !create_graph && !prev.requires_grad() && prev.dtype() == g.dtype() => {
            crate::capture::grad_accumulated(t, &prev);
            prev.try_add_(&g)?;
            prev
        }
        Some(prev) => prev.try_add(&g)?,
    };
    *slot = Some(new);
    Ok(())
}

/// Options of [`Tensor::backward_with`] (PyTorch's keyword arguments of
/// `Tensor.backward`). `Default` is PyTorch's: free the graph, record nothing.
///
/// ```
/// use autograd_tensor::BackwardOptions;
/// let o = BackwardOptions { retain_graph: true, ..Default::default() };
/// assert!(o.retain_graph && !o.create_graph);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardOptions {
    /// Keep the saved tensors so that the graph can be differentiated again.
    pub retain_graph: bool,
    /// Record the backward pass, for higher-order gradients (implies `retain_graph`).
    pub create_graph: bool,
}

/// Options of [`autograd::grad`](crate::autograd::grad) (PyTorch's keyword
/// arguments of `torch.autograd.grad`). `Default` is PyTorch's.
///
/// ```
/// use autograd_tensor::GradOptions;
/// let o = GradOptions { create_graph: true, ..Default::default() };
/// assert!(!o.allow_unused);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GradOptions {
    /// Keep the saved tensors for another pass (always kept with `create_graph`).
    pub retain_graph: bool,
    /// Record the backward pass, so the returned gradients can be differentiated again.
    pub create_graph: bool,
    /// An input that does not influence the outputs gets `None` instead of an `Err`.
    pub allow_unused: bool,
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
        self.backward_with(None, BackwardOptions::default())
    }

    /// Backward with an explicit upstream gradient (required for non-scalar
    /// outputs) and [`BackwardOptions`] (`retain_graph`, `create_graph`).
    ///
    /// ```
    /// use autograd_tensor::{BackwardOptions, Tensor};
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    /// let y = &x * 3.0;
    /// assert!(y.backward().is_err()); // not a scalar
    /// y.backward_with(Some(&y.ones_like()), BackwardOptions::default()).unwrap();
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![3.0, 3.0]);
    /// ```
    pub fn backward_with(&self, grad: Option<&Tensor<B>>, options: BackwardOptions) -> Result<()> {
        let BackwardOptions { retain_graph, create_graph } = options;
        let g = match grad {
            Some(g) => g.clone(),
            None => {
                if self.numel() != 1 {
                    return Err(Error::Autograd(format!(
                        "grad can be implicitly created only for scalar outputs (this tensor has shape {:?}); pass a gradient to backward_with",
                        self.shape()
                    )));
                }
                self.ones_like()
            }
        };
        run_backward(&[(self.clone(), g)], retain_graph || create_graph, create_graph, None).map(|_| ())
    }
}

/// Gradients of `outputs` with respect to `inputs`, returned instead of
/// accumulated (PyTorch's `torch.autograd.grad`).
///
/// `grad_outputs` defaults to ones for scalar outputs. With
/// [`GradOptions::create_graph`] the returned gradients carry a graph and
/// can be differentiated again. An input that does not influence the
/// outputs is an `Err` unless [`GradOptions::allow_unused`], in which case
/// its entry is `None`.
///
/// ```
/// use autograd_tensor::{Tensor, autograd, GradOptions};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = x.powf(3.0);
/// let g = autograd::grad(&[y], &[x.clone()], None, GradOptions { create_graph: true, ..Default::default() }).unwrap();
/// let dy = g[0].clone().unwrap();
/// assert_eq!(dy.item(), 12.0);
/// let g2 = autograd::grad(&[dy], &[x.clone()], None, GradOptions::default()).unwrap();
/// assert_eq!(g2[0].as_ref().unwrap().item(), 12.0); // 6x
/// assert!(x.grad().is_none());
/// ```
pub fn grad<B: Backend>(
    outputs: &[Tensor<B>],
    inputs: &[Tensor<B>],
    grad_outputs: Option<&[Tensor<B>]>,
    options: GradOptions,
) -> Result<Vec<Option<Tensor<B>>>> {
    let GradOptions { retain_graph, create_graph, allow_unused } = options;
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        let g = match grad_outputs.and_then(|g| g.get(i)) {
            Some(g) => g.clone(),
            None if o.numel() == 1 => o.ones_like(),
            None => {
                return Err(Error::Autograd(format!(
                    "grad can be implicitly created only for scalar outputs (output {i} has shape {:?}); pass grad_outputs",
                    o.shape()
                )));
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
    if !allow_unused && let Some(i) = res.iter().position(|r| r.is_none()) {
        return Err(Error::Autograd(format!(
            "one of the differentiated tensors (input {i}) appears to not have been used in the graph; pass GradOptions {{ allow_unused: true, .. }} if this is expected"
        )));
    }
    Ok(res)
}
