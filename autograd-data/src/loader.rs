//! Mini-batches from tensors (PyTorch's `TensorDataset` + `DataLoader`).

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
}

impl<B: Backend> DataLoader<B> {
    /// Batches of `batch_size` samples in order (`batch_size` is clamped to at least 1).
    pub fn new(dataset: TensorDataset<B>, batch_size: usize) -> Self {
        DataLoader { dataset, batch_size: batch_size.max(1), drop_last: false, rng: None }
    }
    /// Shuffle each epoch, from a generator seeded with `seed`.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.rng = Some(Generator::new(seed));
        self
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
        let n = self.dataset.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// One epoch's batches; each batch holds one tensor per dataset tensor.
    pub fn epoch(&mut self) -> Batches<'_, B> {
        let n = self.dataset.len();
        let order = self.rng.as_mut().map(|rng| {
            // Fisher-Yates with the loader's generator.
            let mut idx: Vec<i64> = (0..n as i64).collect();
            for i in (1..n).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                idx.swap(i, j);
            }
            idx
        });
        Batches { loader: self, order, next: 0, batches: 0 }
    }
}

/// Iterator over one epoch of a [`DataLoader`].
pub struct Batches<'a, B: Backend> {
    loader: &'a DataLoader<B>,
    order: Option<Vec<i64>>,
    next: usize,
    batches: usize,
}

impl<B: Backend> Iterator for Batches<'_, B> {
    type Item = Vec<Tensor<B>>;
    fn next(&mut self) -> Option<Vec<Tensor<B>>> {
        if self.batches >= self.loader.num_batches() {
            return None;
        }
        let n = self.loader.dataset.len();
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
