//! Which samples a rank sees: PyTorch's `DistributedSampler`.

use autograd_core::rng::Generator;
use autograd_core::{Error, Result};

/// A random permutation of `0..n` (Fisher-Yates with `rng`): the one
/// shuffle of the loader and of the sampler.
pub(crate) fn permutation(n: usize, rng: &mut Generator) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        idx.swap(i, j);
    }
    idx
}

/// Splits a data set into `num_replicas` disjoint shards, one per rank, as
/// PyTorch's `torch.utils.data.DistributedSampler`: every epoch the indices
/// are shuffled from `seed + epoch` (the same order on every rank, so the
/// shards stay disjoint), padded by repeating the first indices until they
/// divide evenly (or, with `drop_last`, cut to the largest multiple of
/// `num_replicas`), and rank `r` takes every `num_replicas`-th index
/// starting at `r`. Hand it to [`DataLoader::sampler`](crate::DataLoader::sampler):
/// the loader passes its epoch count, so there is no `set_epoch` to forget.
///
/// ```
/// use autograd_data::DistributedSampler;
/// let s0 = DistributedSampler::new(2, 0).unwrap().shuffle(false);
/// let s1 = DistributedSampler::new(2, 1).unwrap().shuffle(false);
/// assert_eq!(s0.indices(5, 0), vec![0, 2, 4]);
/// assert_eq!(s1.indices(5, 0), vec![1, 3, 0]); // padded with the first index
/// let d1 = s1.clone().drop_last(true);
/// assert_eq!(d1.indices(5, 0), vec![1, 3]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// The shard of rank `rank` out of `num_replicas`, shuffled from seed 0
    /// (PyTorch's defaults). `Err` for no replicas or a rank outside them.
    pub fn new(num_replicas: usize, rank: usize) -> Result<Self> {
        if num_replicas == 0 || rank >= num_replicas {
            return Err(Error::msg(format!(
                "DistributedSampler: invalid rank {rank} for {num_replicas} replicas; rank should be in [0, {}]",
                num_replicas.saturating_sub(1)
            )));
        }
        Ok(DistributedSampler { num_replicas, rank, shuffle: true, seed: 0, drop_last: false })
    }
    /// Whether to shuffle each epoch (default true).
    pub fn shuffle(mut self, on: bool) -> Self {
        self.shuffle = on;
        self
    }
    /// The seed every rank shares (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Drop the tail instead of padding (default false).
    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }
    /// The number of ranks.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Samples this rank sees per epoch of a data set of `len` samples
    /// (the same on every rank).
    pub fn num_samples(&self, len: usize) -> usize {
        if self.drop_last { len / self.num_replicas } else { len.div_ceil(self.num_replicas) }
    }
    /// This rank's indices into a data set of `len` samples in epoch `epoch`.
    pub fn indices(&self, len: usize, epoch: usize) -> Vec<usize> {
        let mut all =
            if self.shuffle { permutation(len, &mut Generator::new(self.seed.wrapping_add(epoch as u64))) } else { (0..len).collect() };
        let total = self.num_samples(len) * self.num_replicas;
        if total > len {
            // Pad by cycling through the order from its start (len > 0 here: total > len >= 0).
            let pad: Vec<usize> = all.iter().copied().cycle().take(total - len).collect();
            all.extend(pad);
        }
        all.truncate(total);
        all.into_iter().skip(self.rank).step_by(self.num_replicas).collect()
    }
}
