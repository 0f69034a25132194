//! The `Tensor` handle: data, layout and autograd metadata.

use crate::autograd_meta::AutogradMeta;
use crate::node::Node;
use autograd_core::Element;
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Error, HostData, Layout, Result, Shape};
use std::panic::Location;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// Storage shared by a tensor and all its views, with the version counter
/// that in-place ops bump.
pub(crate) struct StorageCell<B: Backend> {
    pub(crate) data: RwLock<B::Storage>,
    pub(crate) version: AtomicU64,
    /// For a parameter's copy made by autocast's weight-cast cache: its
    /// bytes, counted apart from activations for as long as the storage
    /// lives (the cache and any graph that saved it share this cell).
    pub(crate) _set_aside: Option<autograd_core::memory::CastCacheBytes>,
}

impl<B: Backend> StorageCell<B> {
    /// A cell holding `data` at version 0.
    pub(crate) fn new(data: B::Storage) -> Arc<Self> {
        Arc::new(StorageCell { data: RwLock::new(data), version: AtomicU64::new(0), _set_aside: None })
    }
    /// A cell holding a cast cache's copy, its bytes set apart by `bytes`.
    pub(crate) fn set_aside(data: B::Storage, bytes: autograd_core::memory::CastCacheBytes) -> Arc<Self> {
        Arc::new(StorageCell { data: RwLock::new(data), version: AtomicU64::new(0), _set_aside: Some(bytes) })
    }
}

/// What a handle points at: the data (storage, view, dtype) and the
/// autograd metadata.
pub(crate) struct TensorImpl<B: Backend> {
    pub(crate) storage: Arc<StorageCell<B>>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    /// Made under `inference_mode`: may never enter a recorded graph.
    pub(crate) inference: bool,
    pub(crate) autograd: AutogradMeta<B>,
}

/// An n-dimensional array on backend `B` that records the ops applied to it.
///
/// Cloning is cheap (a reference count); clones are the same tensor, with
/// the same gradient. Views (`transpose`, `narrow`, `expand`, ...) share the
/// storage.
///
/// ```
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// type T = Tensor<RefBackend>;
/// let x = T::from_vec(vec![1.0f64, 2.0, 3.0], [3]).requires_grad_(true);
/// let y = (&x * &x).sum();
/// y.backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
/// ```
pub struct Tensor<B: Backend> {
    pub(crate) inner: Arc<TensorImpl<B>>,
}

impl<B: Backend> Clone for Tensor<B> {
    fn clone(&self) -> Self {
        Tensor { inner: self.inner.clone() }
    }
}

/// Generates, for each constructor `name_dtype(args, dtype)`, the float32
/// forms `name(args)` and `try_name(args)` (PyTorch's default dtype).
macro_rules! default_dtype_constructors {
    ($($name:ident($($arg:ident: $ty:ty),*) = $with:ident, $try:ident, $try_with:ident;)*) => {$(
        #[doc = concat!("[`Tensor::", stringify!($with), "`] in float32, PyTorch's default dtype.")]
        ///
        /// ```
        /// use autograd_tensor::Tensor;
        /// use autograd_core::{RefBackend, DType};
        /// assert_eq!(Tensor::<RefBackend>::randn([2, 2]).dtype(), DType::F32);
        /// ```
        #[track_caller]
        pub fn $name($($arg: $ty),*) -> Self {
            Self::$with($($arg,)* DType::F32)
        }
        #[doc = concat!("Fallible [`Tensor::", stringify!($name), "`].")]
        #[track_caller]
        pub fn $try($($arg: $ty),*) -> Result<Self> {
            Self::$try_with($($arg,)* DType::F32)
        }
    )*};
}

impl<B: Backend> Tensor<B> {
    // ----- construction ---------------------------------------------------

    pub(crate) fn from_parts(
        storage: Arc<StorageCell<B>>,
        layout: Layout,
        dtype: DType,
        grad_fn: Option<Arc<Node<B>>>,
        requires_grad: bool,
    ) -> Self {
        Tensor {
            inner: Arc::new(TensorImpl {
                storage,
                layout,
                dtype,
                inference: crate::grad_mode::is_inference_mode(),
                autograd: AutogradMeta::new(grad_fn, requires_grad),
            }),
        }
    }

    /// A tensor (no graph) over backend storage viewed through `layout`: what
    /// a backend-level program (a compiled step's replay) hands back to
    /// tensor code. `Err` if the layout reaches outside the storage.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
    /// let s = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0, 3.0, 4.0]));
    /// let t = Tensor::<RefBackend>::try_from_storage(s, Layout::contiguous(Shape::from([2, 2]))).unwrap();
    /// assert_eq!(t.to_vec::<f64>(), vec![1.0, 2.0, 3.0, 4.0]);
    /// let s = RefBackend::from_host(HostData::from(vec![1.0f64]));
    /// assert!(Tensor::<RefBackend>::try_from_storage(s, Layout::contiguous(Shape::from([2]))).is_err());
    /// ```
    pub fn try_from_storage(storage: B::Storage, layout: Layout) -> Result<Self> {
        autograd_core::validate::input("from_storage", B::len(&storage), &layout)?;
        let dtype = B::dtype(&storage);
        let cell = StorageCell::new(storage);
        Ok(Self::from_parts(cell, layout, dtype, None, false))
    }

    /// A tensor (no graph) owning a fresh contiguous storage of `shape`.
    pub(crate) fn from_storage(storage: B::Storage, shape: Shape) -> Self {
        let dtype = B::dtype(&storage);
        let cell = StorageCell::new(storage);
        Self::from_parts(cell, Layout::contiguous(shape), dtype, None, false)
    }

    /// A tensor from host data and a shape.
    #[track_caller]
    pub fn try_from_host(data: HostData, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if shape.checked_numel() != Some(data.len()) {
            return Err(Error::InvalidShape {
                op: "from_vec",
                msg: format!(
                    "{} values cannot fill a tensor of shape {:?} ({} elements)",
                    data.len(),
                    shape,
                    shape.checked_numel().map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
                ),
                location: Some(Location::caller()),
            });
        }
        Ok(Self::from_storage(B::from_host(data), shape))
    }

    /// A tensor from a vector of values and a shape.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let t = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(t.dims(), &[2, 2]);
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Self {
        Self::try_from_host(T::into_host(data), shape).or_panic()
    }

    /// Fallible [`Tensor::from_vec`].
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// assert!(Tensor::<RefBackend>::try_from_vec(Vec::<f32>::new(), [1 << 32, 1 << 32]).is_err());
    /// ```
    #[track_caller]
    pub fn try_from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Self> {
        Self::try_from_host(T::into_host(data), shape)
    }

    /// A tensor from a slice of values and a shape.
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Self {
        Self::from_vec(data.to_vec(), shape)
    }

    /// A 0-d tensor holding one value.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// assert_eq!(Tensor::<RefBackend>::scalar(2.5f64).item(), 2.5);
    /// ```
    pub fn scalar<T: Element>(v: T) -> Self {
        Self::from_vec(vec![v], Shape::scalar())
    }

    /// A tensor of `shape` filled with `value`; `Err` (never an abort) when
    /// the element count overflows or the bytes cannot be allocated.
    ///
    /// The check covers sizes above `isize::MAX` bytes and above the
    /// machine's physical memory, and any allocation the allocator refuses.
    /// An allocation the operating system overcommits and later kills the
    /// process for (when its pages are touched) cannot be caught by any library.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// assert_eq!(Tensor::<RefBackend>::try_full([2], 0.5).unwrap().to_vec::<f32>(), vec![0.5, 0.5]);
    /// let e = Tensor::<RefBackend>::try_full([1 << 40], 0.0).unwrap_err();
    /// assert!(e.to_string().contains("4398046511104 bytes"));
    /// assert!(Tensor::<RefBackend>::try_full([1 << 32, 1 << 32], 0.0).is_err());
    /// ```
    #[track_caller]
    pub fn try_full_dtype(shape: impl Into<Shape>, value: f64, dtype: DType) -> Result<Self> {
        let loc = Location::caller();
        let shape = shape.into();
        shape.try_numel("full").map_err(|e| e.at(loc))?;
        B::full(&shape, value, dtype).map(|s| Self::from_storage(s, shape)).map_err(|e| e.at(loc))
    }

    /// A tensor of `shape` filled with `value` (panics where [`Tensor::try_full_dtype`] is an `Err`).
    #[track_caller]
    pub fn full_dtype(shape: impl Into<Shape>, value: f64, dtype: DType) -> Self {
        Self::try_full_dtype(shape, value, dtype).or_panic()
    }

    /// Zeros.
    #[track_caller]
    pub fn zeros_dtype(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::full_dtype(shape, 0.0, dtype)
    }

    /// Fallible [`Tensor::zeros_dtype`] (see [`Tensor::try_full_dtype`]).
    #[track_caller]
    pub fn try_zeros_dtype(shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::try_full_dtype(shape, 0.0, dtype)
    }

    /// Ones.
    #[track_caller]
    pub fn ones_dtype(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::full_dtype(shape, 1.0, dtype)
    }

    /// Fallible [`Tensor::ones_dtype`] (see [`Tensor::try_full_dtype`]).
    #[track_caller]
    pub fn try_ones_dtype(shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::try_full_dtype(shape, 1.0, dtype)
    }

    /// Zeros with the shape and dtype of `self`.
    #[track_caller]
    pub fn zeros_like(&self) -> Self {
        Self::zeros_dtype(self.shape().clone(), self.dtype())
    }

    /// Ones with the shape and dtype of `self`.
    #[track_caller]
    pub fn ones_like(&self) -> Self {
        Self::ones_dtype(self.shape().clone(), self.dtype())
    }

    /// `value` with the shape and dtype of `self`.
    #[track_caller]
    pub fn full_like(&self, value: f64) -> Self {
        Self::full_dtype(self.shape().clone(), value, self.dtype())
    }

    /// `start, start + step, ...` up to but excluding `end` (panics where
    /// [`Tensor::try_arange_dtype`] is an `Err`).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// assert_eq!(Tensor::<RefBackend>::arange_dtype(0.0, 3.0, 1.0, DType::I64).to_vec::<i64>(), vec![0, 1, 2]);
    /// ```
    #[track_caller]
    pub fn arange_dtype(start: f64, end: f64, step: f64, dtype: DType) -> Self {
        Self::try_arange_dtype(start, end, step, dtype).or_panic()
    }

    /// Fallible [`Tensor::arange_dtype`]: `Err` for a zero or non-finite step, a
    /// step of the wrong sign (as PyTorch), or more values than fit in memory.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// assert!(Tensor::<RefBackend>::try_arange(0.0, 1.0, 0.0).is_err());
    /// assert!(Tensor::<RefBackend>::try_arange(0.0, 1.0, -1.0).is_err());
    /// assert_eq!(Tensor::<RefBackend>::try_arange_dtype(3.0, 0.0, -1.0, DType::F64).unwrap().to_vec::<f64>(), vec![3.0, 2.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn try_arange_dtype(start: f64, end: f64, step: f64, dtype: DType) -> Result<Self> {
        let loc = Location::caller();
        let bad = |why: &str| Error::InvalidShape {
            op: "arange",
            msg: format!("{why} (start {start}, end {end}, step {step})"),
            location: Some(loc),
        };
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(bad("start, end and step must be finite and step nonzero"));
        }
        if (end - start) * step.signum() < 0.0 {
            return Err(bad("upper bound and larger bound inconsistent with step sign"));
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if !n.is_finite() || n > autograd_core::shape::MAX_NUMEL as f64 {
            return Err(bad("too many values"));
        }
        let n = n as usize;
        let mut v = autograd_core::memory::try_with_capacity::<f64>("arange", n).map_err(|e| e.at(loc))?;
        v.extend((0..n).map(|i| start + i as f64 * step));
        Self::try_from_host(HostData::from_f64(&v, dtype), [n])
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive.
    #[track_caller]
    pub fn linspace_dtype(start: f64, end: f64, steps: usize, dtype: DType) -> Self {
        Self::try_linspace_dtype(start, end, steps, dtype).or_panic()
    }

    /// Fallible [`Tensor::linspace_dtype`] (`Err` where the values cannot be allocated).
    #[track_caller]
    pub fn try_linspace_dtype(start: f64, end: f64, steps: usize, dtype: DType) -> Result<Self> {
        let loc = Location::caller();
        let mut v = autograd_core::memory::try_with_capacity::<f64>("linspace", steps).map_err(|e| e.at(loc))?;
        match steps {
            0 => {}
            1 => v.push(start),
            _ => {
                let h = (end - start) / (steps - 1) as f64;
                // Fill the second half from the end, as PyTorch does, so the last value is exactly `end`.
                v.extend((0..steps).map(|i| if i < steps / 2 { start + h * i as f64 } else { end - h * (steps - 1 - i) as f64 }));
            }
        }
        Self::try_from_host(HostData::from_f64(&v, dtype), [steps])
    }

    // PyTorch's default dtype: `torch.zeros(2, 3)` is float32. Each
    // constructor above that takes a dtype has a short form here without it.
    default_dtype_constructors! {
        full(shape: impl Into<Shape>, value: f64) = full_dtype, try_full, try_full_dtype;
        zeros(shape: impl Into<Shape>) = zeros_dtype, try_zeros, try_zeros_dtype;
        ones(shape: impl Into<Shape>) = ones_dtype, try_ones, try_ones_dtype;
        rand(shape: impl Into<Shape>) = rand_dtype, try_rand, try_rand_dtype;
        randn(shape: impl Into<Shape>) = randn_dtype, try_randn, try_randn_dtype;
        arange(start: f64, end: f64, step: f64) = arange_dtype, try_arange, try_arange_dtype;
        linspace(start: f64, end: f64, steps: usize) = linspace_dtype, try_linspace, try_linspace_dtype;
    }

    // ----- reading ----------------------------------------------------------

    /// The shape.
    pub fn shape(&self) -> &Shape {
        self.inner.layout.shape()
    }
    /// The dims of the shape.
    pub fn dims(&self) -> &[usize] {
        self.inner.layout.dims()
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.inner.layout.rank()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.inner.layout.numel()
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }
    /// The strided layout over the storage.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }
    /// Whether the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.inner.layout.is_contiguous()
    }
    /// Read access to the backend storage (pair it with [`Tensor::layout`]).
    pub fn storage(&self) -> RwLockReadGuard<'_, B::Storage> {
        self.inner.storage.data.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Whether two tensors share one storage (one is a view of the other, or both of a third).
    pub fn shares_storage(&self, other: &Tensor<B>) -> bool {
        Arc::ptr_eq(&self.inner.storage, &other.inner.storage)
    }
    /// An identity for this tensor handle family (clones share it).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const u8 as usize
    }
    /// The elements in row-major order as host data (panics where
    /// [`Tensor::try_to_host`] is an `Err`).
    #[track_caller]
    pub fn to_host(&self) -> HostData {
        self.try_to_host().or_panic()
    }
    /// Fallible [`Tensor::to_host`]: `Err` when the elements cannot be
    /// allocated (a huge expanded view).
    #[track_caller]
    pub fn try_to_host(&self) -> Result<HostData> {
        let loc = Location::caller();
        crate::capture::refuse("a host read of tensor values", "read the step's returned outputs after it ran instead", Some(loc))?;
        B::to_host(&self.storage(), self.layout()).map_err(|e| e.at(loc))
    }
    /// Fallible [`Tensor::to_vec`].
    #[track_caller]
    pub fn try_to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(T::from_host(self.try_to_host()?))
    }
    /// The elements in row-major order, converted to `T`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let t = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]).t();
    /// assert_eq!(t.to_vec::<f64>(), vec![1.0, 3.0, 2.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        T::from_host(self.to_host())
    }
    /// The elements as f64.
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        self.to_host().to_f64_vec()
    }
    /// The single value of a one-element tensor, as f64.
    #[track_caller]
    pub fn item(&self) -> f64 {
        self.try_item().or_panic()
    }
    /// Fallible [`Tensor::item`].
    #[track_caller]
    pub fn try_item(&self) -> Result<f64> {
        self.try_item_as::<f64>()
    }
    /// The single value of a one-element tensor as `T` (PyTorch's `item()`
    /// keeps the tensor's type: an int64 comes back exact, where [`Tensor::item`]'s
    /// f64 rounds it above 2^53).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let n = Tensor::<RefBackend>::from_vec(vec![(1i64 << 53) + 1], [1]);
    /// assert_eq!(n.try_item_as::<i64>().unwrap(), (1 << 53) + 1);
    /// assert_eq!(n.item(), (1u64 << 53) as f64); // the f64 rounds
    /// ```
    #[track_caller]
    pub fn try_item_as<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidShape {
                op: "item",
                msg: format!("a tensor with {} elements (shape {:?}) cannot be converted to a scalar", self.numel(), self.shape()),
                location: Some(Location::caller()),
            });
        }
        Ok(T::from_host(self.try_to_host()?)[0])
    }
}

pub(crate) fn tensor_from_weak<B: Backend>(w: &std::sync::Weak<TensorImpl<B>>) -> Option<Tensor<B>> {
    w.upgrade().map(|inner| Tensor { inner })
}

/// A handle that does not keep its tensor alive (Python's `weakref` to a
/// tensor): what a compiled step keeps of the parameters it guards.
///
/// ```
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([2]);
/// let w = x.downgrade();
/// assert_eq!(w.upgrade().map(|t| t.id()), Some(x.id()));
/// drop(x);
/// assert!(w.upgrade().is_none());
/// ```
pub struct WeakTensor<B: Backend>(std::sync::Weak<TensorImpl<B>>);

impl<B: Backend> Clone for WeakTensor<B> {
    fn clone(&self) -> Self {
        WeakTensor(self.0.clone())
    }
}

impl<B: Backend> WeakTensor<B> {
    /// The tensor, if it is still alive.
    pub fn upgrade(&self) -> Option<Tensor<B>> {
        tensor_from_weak(&self.0)
    }
}

impl<B: Backend> Tensor<B> {
    /// A [`WeakTensor`] to this tensor.
    pub fn downgrade(&self) -> WeakTensor<B> {
        WeakTensor(Arc::downgrade(&self.inner))
    }
}
