//! Checkpointing a sequence of modules by a [`CheckpointPolicy`].

use autograd_core::{Backend, Result};
use autograd_nn::{Module, ModuleFields, Sequential};
use autograd_tensor::{Tensor, is_grad_enabled};
use std::sync::Arc;

use crate::checkpoint::checkpoint;
use crate::policy::{CheckpointPolicy, Plan, Segments};

/// A layer that a checkpoint can run again during backward: shared, so the
/// graph can hold it past the call.
pub type SharedLayer<B> = Arc<dyn Module<B>>;

/// Runs `layers` on `input` split into `segments` segments, all but the
/// last checkpointed (PyTorch's `checkpoint_sequential`).
///
/// ```
/// use autograd_checkpoint::checkpoint_sequential;
/// use autograd_core::{DType, RefBackend};
/// use autograd_nn::{LinearConfig, ReLU};
/// use autograd_tensor::Tensor;
/// use std::sync::Arc;
/// let layers: Vec<autograd_checkpoint::SharedLayer<RefBackend>> =
///     vec![Arc::new(LinearConfig::new(3, 4).with_dtype(DType::F64).init()), Arc::new(ReLU), Arc::new(LinearConfig::new(4, 1).with_dtype(DType::F64).init())];
/// let x = Tensor::<RefBackend>::ones_dtype([2, 3], DType::F64);
/// let y = checkpoint_sequential(&layers, 2, &x).unwrap();
/// y.sum().backward().unwrap();
/// assert_eq!(y.dims(), &[2, 1]);
/// ```
pub fn checkpoint_sequential<B: Backend>(layers: &[SharedLayer<B>], segments: usize, input: &Tensor<B>) -> Result<Tensor<B>> {
    checkpoint_sequential_with(layers, &Segments(segments), input)
}

/// Runs `layers` on `input` following `policy`'s plan.
pub fn checkpoint_sequential_with<B: Backend>(
    layers: &[SharedLayer<B>],
    policy: &dyn CheckpointPolicy,
    input: &Tensor<B>,
) -> Result<Tensor<B>> {
    run_plan(layers, &policy.plan(layers.len())?, input)
}

/// Runs `layers` on `input` following `plan` (whose length must match).
pub fn run_plan<B: Backend>(layers: &[SharedLayer<B>], plan: &Plan, input: &Tensor<B>) -> Result<Tensor<B>> {
    if plan.num_layers() != layers.len() {
        return Err(autograd_core::Error::msg(format!("checkpoint plan covers {} layers, {} given", plan.num_layers(), layers.len())));
    }
    let mut x = input.clone();
    let mut start = 0;
    for seg in &plan.segments {
        let part = &layers[start..start + seg.len];
        start += seg.len;
        x = if seg.checkpoint && is_grad_enabled() {
            let part: Vec<SharedLayer<B>> = part.to_vec();
            let inner = seg.inner.clone().unwrap_or_else(|| Plan::plain(seg.len));
            checkpoint(move |i: &[Tensor<B>]| Ok(vec![run_plan(&part, &inner, &i[0])?]), &[x])?.remove(0)
        } else {
            part.iter().fold(x, |x, l| l.forward(&x))
        };
    }
    Ok(x)
}

/// A [`Sequential`] whose forward checkpoints by a policy. Parameter names
/// are those of the `Sequential` it was made from (`0.weight`...), so state
/// dicts move between the two.
///
/// ```
/// use autograd_checkpoint::{CheckpointedSequential, Sqrt};
/// use autograd_core::{DType, RefBackend};
/// use autograd_nn::{MlpConfig, Module, ModuleExt};
/// use autograd_tensor::Tensor;
/// let model = CheckpointedSequential::new(MlpConfig::new(&[4, 8, 8, 8, 2]).with_dtype(DType::F64).init::<RefBackend>(), Sqrt);
/// assert_eq!(model.named_parameters()[0].0, "0.weight");
/// let y = model.forward(&Tensor::ones_dtype([3, 4], DType::F64));
/// y.sum().backward().unwrap();
/// assert!(model.parameters().iter().all(|p| p.grad().is_some()));
/// ```
pub struct CheckpointedSequential<B: Backend> {
    layers: Vec<SharedLayer<B>>,
    policy: Box<dyn CheckpointPolicy>,
}

impl<B: Backend> CheckpointedSequential<B> {
    /// Takes over the layers of `seq`.
    pub fn new(seq: Sequential<B>, policy: impl CheckpointPolicy + 'static) -> Self {
        CheckpointedSequential { layers: seq.into_layers().into_iter().map(Arc::from).collect(), policy: Box::new(policy) }
    }
    /// The layers.
    pub fn layers(&self) -> &[SharedLayer<B>] {
        &self.layers
    }
    /// The plan the policy makes for these layers.
    pub fn plan(&self) -> Result<Plan> {
        self.policy.plan(self.layers.len())
    }
    /// Replaces the policy.
    pub fn set_policy(&mut self, policy: impl CheckpointPolicy + 'static) {
        self.policy = Box::new(policy);
    }
}

impl<B: Backend> Module<B> for CheckpointedSequential<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        checkpoint_sequential_with(&self.layers, self.policy.as_ref(), x)
    }
}

/// Written by hand: children numbered by position, as the `Sequential` it was made from.
impl<B: Backend> ModuleFields<B> for CheckpointedSequential<B> {
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        self.layers.iter().enumerate().map(|(i, l)| (i.to_string(), &**l)).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        self.layers
            .iter_mut()
            .enumerate()
            .map(|(i, l)| {
                let l = Arc::get_mut(l).unwrap_or_else(|| {
                    panic!("CheckpointedSequential: layer {i} is still held by a graph (run backward or drop the outputs before changing the model)")
                });
                (i.to_string(), l as &mut dyn Module<B>)
            })
            .collect()
    }
    fn type_name(&self) -> &'static str {
        "CheckpointedSequential"
    }
}
