//! Mini-batches from tensors (PyTorch's `TensorDataset` + `DataLoader`).

use crate::sampler::{DistributedSampler, permutation};
use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::Tensor;

/// Tensors that share their first dimension; sample `i` is row `i` of each.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_data::TensorDataset;
/// use autograd_tensor::Tensor;
/// let x = Tensor::<RefBackend>::from_vec(vec![0.0f32; 10], [5, 2]);
/// let y = Tensor::<RefBackend>::from_vec(vec![0i64; 5], [5]);
/// assert_eq!(TensorDataset::new(vec![x, y]).unwrap().len(), 5);
/// ```
#[derive(Clone, Debug)]
pub struct TensorDataset<B: Backend> {
    tensors: Vec<Tensor<B>>,
    len: usize,
}

impl<B: Backend> TensorDataset<B> {
    /// A dataset over `tensors` (at least one; all with the same first dimension).
    pub fn new(tensors: Vec<Tensor<B>>) -> Result<Self> {
        let first = tensors.first().ok_or_else(|| Error::msg("TensorDataset: no tensors"))?;
        if first.rank() == 0 {
            return Err(Error::msg("TensorDataset: tensors need a first (sample) dimension"));
        }
        let len = first.dims()[0];
        for (i, t) in tensors.iter().enumerate() {
            if t.rank() == 0 || t.dims()[0] != len {
                return Err(Error::msg(format!("TensorDataset: tensor {i} has shape {:?}, tensor 0 has {len} samples", t.dims())));
            }
        }
        Ok(TensorDataset { tensors, len })
    }
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The underlying tensors.
    pub fn tensors(&self) -> &[Tensor<B>] {
        &self.tensors
    }
}

/// Batches of a [`TensorDataset`], optionally shuffled with a seeded generator.
/// Each epoch draws a new permutation from the loader's generator, so a run
/// is reproducible from its seed. A batch copies only its own rows (one
/// gather per tensor); without shuffling, batches are views (no copy).
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_data::{DataLoader, TensorDataset};
/// use autograd_tensor::Tensor;
/// let x = Tensor::<RefBackend>::arange_dtype(0.0, 10.0, 1.0, autograd_core::DType::F64);
/// let mut loader = DataLoader::new(TensorDataset::new(vec![x]).unwrap(), 4).shuffle(7).drop_last(true);
/// let batches: Vec<_> = loader.epoch().collect();
/// assert_eq!(batches.len(), 2); // 10 samples, batch 4, last partial batch dropped
/// let mut seen: Vec<f64> = batches.iter().flat_map(|b| b[0].to_vec_f64()).collect();
/// seen.sort_by(f64::total_cmp);
/// seen.dedup();
/// assert_eq!(seen.len(), 8); // distinct samples
/// ```
#[derive(Clone, Debug)]
pub struct DataLoader<B: Backend> {
    dataset: TensorDataset<B>,
    batch_size: usize,
    drop_last: bool,
    rng: Option<Generator>,
    /// Which samples, in which order, when sharded across ranks.
    sampler: Option<DistributedSampler>,
    /// Epochs started so far.
    epochs: usize,
}

/// Where a [`DataLoader`] stands, to resume a run exactly: epoch `epoch`
/// (counted from 0), whose order is drawn from a generator in state `rng`,
/// with `batch` batches already taken. From [`Batches::state`] (mid-epoch)
/// or [`DataLoader::state`] (between epochs); [`DataLoader::resume`] takes
/// it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderState {
    /// The epoch, counted from 0.
    pub epoch: usize,
    /// Batches of that epoch already taken.
    pub batch: usize,
    /// The shuffling generator's state before the epoch's order was drawn (`None`: no shuffling).
    pub rng: Option<[u64; 4]>,
}

impl<B: Backend> DataLoader<B> {
    /// Batches of `batch_size` samples in order; panics at the caller's
    /// line where [`DataLoader::try_new`] is an `Err` (a batch size of 0).
    #[track_caller]
    pub fn new(dataset: TensorDataset<B>, batch_size: usize) -> Self {
        match Self::try_new(dataset, batch_size) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        }
    }
    /// Batches of `batch_size` samples in order; `Err` for a batch size of
    /// 0, as PyTorch's "batch_size should be a positive integer value".
    ///
    /// ```
    /// use autograd_core::RefBackend;
    /// use autograd_data::{DataLoader, TensorDataset};
    /// use autograd_tensor::Tensor;
    /// let data = TensorDataset::new(vec![Tensor::<RefBackend>::arange(0.0, 4.0, 1.0)]).unwrap();
    /// let e = DataLoader::try_new(data.clone(), 0).unwrap_err().to_string();
    /// assert!(e.contains("batch_size should be a positive integer") && e.contains(file!()), "{e}");
    /// assert_eq!(DataLoader::try_new(data, 3).unwrap().num_batches(), 2);
    /// ```
    #[track_caller]
    pub fn try_new(dataset: TensorDataset<B>, batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            let at = std::panic::Location::caller();
            return Err(Error::msg(format!(
                "DataLoader: batch_size should be a positive integer value, but got batch_size=0 (called at {at})"
            )));
        }
        Ok(DataLoader { dataset, batch_size, drop_last: false, rng: None, sampler: None, epochs: 0 })
    }
    /// Shuffle each epoch, from a generator seeded with `seed`.
    /// Replaces a [`DataLoader::sampler`] given before.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.rng = Some(Generator::new(seed));
        self.sampler = None;
        self
    }
    /// Takes this rank's shard of every epoch from `sampler` (PyTorch's
    /// `DataLoader(sampler=DistributedSampler(...))`), in the sampler's
    /// order, with the loader's epoch count as the sampler's epoch.
    /// Replaces a [`DataLoader::shuffle`] given before (the sampler shuffles).
    ///
    /// ```
    /// use autograd_core::RefBackend;
    /// use autograd_data::{DataLoader, DistributedSampler, TensorDataset};
    /// use autograd_tensor::Tensor;
    /// let data = || TensorDataset::new(vec![Tensor::<RefBackend>::arange(0.0, 10.0, 1.0)]).unwrap();
    /// let mut seen = Vec::new();
    /// for rank in 0..2 {
    ///     let mut loader = DataLoader::new(data(), 2).sampler(DistributedSampler::new(2, rank).unwrap().seed(3));
    ///     assert_eq!(loader.num_batches(), 3); // 5 samples per rank
    ///     seen.extend(loader.epoch().flat_map(|b| b[0].to_vec::<f32>()));
    /// }
    /// seen.sort_by(f32::total_cmp);
    /// assert_eq!(seen, (0..10).map(|i| i as f32).collect::<Vec<_>>());
    /// ```
    pub fn sampler(mut self, sampler: DistributedSampler) -> Self {
        self.sampler = Some(sampler);
        self.rng = None;
        self
    }
    /// Samples per epoch: the data set's, or this rank's shard of it.
    fn num_samples(&self) -> usize {
        let n = self.dataset.len();
        self.sampler.as_ref().map_or(n, |s| s.num_samples(n))
    }
    /// Drop the last batch if it is smaller than `batch_size`.
    pub fn drop_last(mut self, drop: bool) -> Self {
        self.drop_last = drop;
        self
    }
    /// The dataset.
    pub fn dataset(&self) -> &TensorDataset<B> {
        &self.dataset
    }
    /// Batches per epoch.
    pub fn num_batches(&self) -> usize {
        let n = self.num_samples();
        if self.drop_last { n / self.batch_size } else { n.div_ceil(self.batch_size) }
    }

    /// The state before the next epoch (batch 0 of it).
    pub fn state(&self) -> LoaderState {
        LoaderState { epoch: self.epochs, batch: 0, rng: self.rng.as_ref().map(Generator::state) }
    }

    /// Continues from a saved [`LoaderState`]: the same epoch, in the same
    /// order, from the batch after the last one taken; later epochs follow
    /// as they would have. `Err` (and nothing changes) when the state does
    /// not fit this loader (shuffling on one side only, a batch past the end).
    ///
    /// ```
    /// use autograd_core::RefBackend;
    /// use autograd_data::{DataLoader, TensorDataset};
    /// use autograd_tensor::Tensor;
    /// let data = || TensorDataset::new(vec![Tensor::<RefBackend>::arange(0.0, 10.0, 1.0)]).unwrap();
    /// let mut a = DataLoader::new(data(), 3).shuffle(1);
    /// let mut it = a.epoch();
    /// it.next();
    /// let saved = it.state();
    /// let rest: Vec<Vec<f32>> = it.map(|b| b[0].to_vec()).collect();
    /// let mut b = DataLoader::new(data(), 3).shuffle(99);
    /// let resumed: Vec<Vec<f32>> = b.resume(&saved).unwrap().map(|b| b[0].to_vec()).collect();
    /// assert_eq!(rest, resumed);
    /// assert_eq!(a.epoch().next().unwrap()[0].to_vec::<f32>(), b.epoch().next().unwrap()[0].to_vec::<f32>());
    /// ```
    pub fn resume(&mut self, state: &LoaderState) -> Result<Batches<'_, B>> {
        if state.rng.is_some() != self.rng.is_some() {
            return Err(Error::msg("DataLoader::resume: the saved state and this loader disagree on shuffling"));
        }
        if state.batch > self.num_batches() {
            return Err(Error::msg(format!("DataLoader::resume: batch {} of an epoch of {} batches", state.batch, self.num_batches())));
        }
        self.rng = state.rng.map(Generator::from_state);
        self.epochs = state.epoch;
        let mut batches = self.epoch();
        batches.next = (state.batch * batches.loader.batch_size).min(batches.loader.num_samples());
        batches.batches = state.batch;
        Ok(batches)
    }

    /// One epoch's batches; each batch holds one tensor per dataset tensor.
    pub fn epoch(&mut self) -> Batches<'_, B> {
        let rng_before = self.rng.as_ref().map(Generator::state);
        let epoch = self.epochs;
        self.epochs += 1;
        let n = self.dataset.len();
        let order = match (&self.sampler, self.rng.as_mut()) {
            (Some(s), _) => Some(s.indices(n, epoch)),
            (None, Some(rng)) => Some(permutation(n, rng)),
            (None, None) => None,
        };
        let order = order.map(|o| o.into_iter().map(|i| i as i64).collect());
        Batches { loader: self, order, next: 0, batches: 0, epoch, rng_before }
    }
}

/// Iterator over one epoch of a [`DataLoader`].
pub struct Batches<'a, B: Backend> {
    loader: &'a DataLoader<B>,
    order: Option<Vec<i64>>,
    next: usize,
    batches: usize,
    epoch: usize,
    rng_before: Option<[u64; 4]>,
}

impl<B: Backend> Batches<'_, B> {
    /// Where this epoch stands (for [`DataLoader::resume`]).
    pub fn state(&self) -> LoaderState {
        LoaderState { epoch: self.epoch, batch: self.batches, rng: self.rng_before }
    }
}

impl<B: Backend> Iterator for Batches<'_, B> {
    type Item = Vec<Tensor<B>>;
    fn next(&mut self) -> Option<Vec<Tensor<B>>> {
        if self.batches >= self.loader.num_batches() {
            return None;
        }
        let n = self.loader.num_samples();
        let start = self.next;
        let len = self.loader.batch_size.min(n - start);
        self.next += len;
        self.batches += 1;
        let ts = &self.loader.dataset.tensors;
        Some(match &self.order {
            None => ts.iter().map(|t| t.narrow(0, start, len)).collect(),
            Some(order) => {
                let idx = Tensor::<B>::from_slice(&order[start..start + len], [len]);
                debug_assert_eq!(idx.dtype(), DType::I64);
                ts.iter().map(|t| t.index_select(0, &idx)).collect()
            }
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.loader.num_batches() - self.batches;
        (left, Some(left))
    }
}

impl<B: Backend> ExactSizeIterator for Batches<'_, B> {}
