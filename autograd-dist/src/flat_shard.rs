//! A bucket's parameters as views of one flat buffer, and a rank's range
//! of it: what ZeRO-2's reducer scatters gradients into and its optimizer
//! updates and gathers.

use crate::communicator::{CollectiveOp, Communicator, Work};
use crate::host;
use autograd_core::{DistError, HostData, Result};
use autograd_tensor::{Tensor, no_grad};

/// One bucket's parameters, backed by one flat buffer, and this rank's
/// range of it.
pub(crate) struct FlatShard<B: autograd_core::Backend> {
    /// The bucket's parameters (views of `flat`), in bucket order.
    params: Vec<Tensor<B>>,
    /// Every parameter of the bucket, one after the other, then zeros up
    /// to `len * world` values.
    flat: Tensor<B>,
    /// Values per rank.
    len: usize,
    /// This rank's range of `flat` (a view: the optimizer's updates land
    /// in the parameters), a leaf whose gradient is the averaged range.
    shard: Tensor<B>,
}

impl<B: autograd_core::Backend> FlatShard<B> {
    /// The flat buffer of `params` (one dtype) with their values now, and
    /// the views of it that replace them, in order.
    pub(crate) fn new(params: Vec<Tensor<B>>, comm: &dyn Communicator) -> Result<(Self, Vec<Tensor<B>>)> {
        let numel = params.iter().try_fold(0usize, |n, p| n.checked_add(p.numel())).ok_or_else(|| DistError::InvalidArgument {
            op: "ShardedDataParallel",
            detail: "a bucket's element count overflows usize".into(),
        })?;
        let (world, rank) = (comm.world_size(), comm.rank());
        let len = numel.div_ceil(world);
        let mut values = flatten(&params)?;
        host::pad(&mut values, len * world);
        let flat = Tensor::<B>::try_from_host(values, [len * world])?;
        let mut views = Vec::with_capacity(params.len());
        let mut offset = 0;
        for p in &params {
            let dims: Vec<isize> = p.dims().iter().map(|&d| d as isize).collect();
            views.push(flat.try_narrow(0, offset, p.numel())?.try_reshape(&dims)?.detach().requires_grad_(p.requires_grad()));
            offset += p.numel();
        }
        let shard = flat.try_narrow(0, rank * len, len)?.detach().requires_grad_(true);
        Ok((FlatShard { params: views.clone(), flat, len, shard }, views))
    }

    /// The bucket's parameters (views of the flat buffer).
    pub(crate) fn params(&self) -> &[Tensor<B>] {
        &self.params
    }

    /// The rank's range, for its optimizer.
    pub(crate) fn shard(&self) -> &Tensor<B> {
        &self.shard
    }

    /// Launches the reduce-scatter (average) of the bucket's gradients
    /// `parts` (one per parameter, in bucket order).
    pub(crate) fn reduce_scatter(&self, comm: &dyn Communicator, parts: &[HostData]) -> Result<Work> {
        let mut flat = host::concat(&parts.iter().collect::<Vec<_>>())?;
        host::pad(&mut flat, self.len * comm.world_size());
        comm.reduce_scatter_async(flat, CollectiveOp::Avg)
    }

    /// Adds the averaged range a reduce-scatter gave to the shard's
    /// gradient (gradients accumulate until `zero_grad`, as `.grad` does).
    pub(crate) fn accumulate_grad(&self, mut out: Vec<HostData>) -> Result<()> {
        let data = out.pop().ok_or_else(|| DistError::Transport { what: "reduce_scatter".into(), detail: "no result".into() })?;
        let g = Tensor::<B>::try_from_host(data, [self.len])?;
        let g = match self.shard.grad() {
            Some(old) => no_grad(|| old.try_add(&g))?,
            None => g,
        };
        self.shard.set_grad(Some(g));
        Ok(())
    }

    /// Launches the all-gather of every rank's range.
    pub(crate) fn gather(&self, comm: &dyn Communicator) -> Result<Work> {
        comm.all_gather_async(self.shard.try_to_host()?)
    }

    /// Writes the gathered ranges (the whole bucket, padded) into the parameters.
    pub(crate) fn write_back(&self, mut gathered: Vec<HostData>) -> Result<()> {
        let all = gathered.pop().ok_or_else(|| DistError::Transport { what: "all_gather".into(), detail: "no result".into() })?;
        let values = Tensor::<B>::try_from_host(all, self.flat.shape().clone())?;
        no_grad(|| self.flat.try_copy_(&values))
    }
}

/// `params`' values, flattened one after the other.
fn flatten<B: autograd_core::Backend>(params: &[Tensor<B>]) -> Result<HostData> {
    let parts: Vec<HostData> = params.iter().map(Tensor::try_to_host).collect::<Result<_>>()?;
    host::concat(&parts.iter().collect::<Vec<_>>())
}
