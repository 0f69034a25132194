//! Workloads shared by the criterion benches and the `workloads` binary that
//! the PyTorch comparison script (`compare_pytorch.py`) runs.

pub mod alloc_count;

use autograd_core::{Backend, DType};
use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use std::time::Instant;

/// A 1-element tensor through `n` chained ops (alternately `* c1` and `+ c2`,
/// both 1-element tensors), then backward and a read of the gradient.
/// Returns the gradient so the work cannot be optimised away.
pub fn autograd_chain<B: Backend>(n: usize) -> f32 {
    let x = Tensor::<B>::from_vec(vec![1.0f32], [1]).requires_grad_(true);
    let c1 = Tensor::<B>::from_vec(vec![1.0001f32], [1]);
    let c2 = Tensor::<B>::from_vec(vec![0.5f32], [1]);
    let mut y = x.clone();
    for i in 0..n {
        y = if i % 2 == 0 { &y * &c1 } else { &y + &c2 };
    }
    y.sum().backward().expect("backward");
    x.grad().expect("grad").to_vec::<f32>()[0]
}

/// Two random `n x n` f32 matrices on the CPU backend.
pub fn square(n: usize, dtype: DType) -> (Tensor<Cpu>, Tensor<Cpu>) {
    autograd_tensor::manual_seed(0);
    (Tensor::randn_dtype([n, n], dtype), Tensor::randn_dtype([n, n], dtype))
}

/// Median seconds of `f` over `reps` runs after one warm-up.
pub fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    t[reps / 2]
}

/// Runs `f` on a rayon pool of `threads` threads.
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool").install(f)
}

/// `tensors` f32 parameters of `total / tensors` elements each, with random
/// gradients, and an Adam optimizer over them (the `optim_step` workload:
/// PyTorch's Adam over the same tensors is the reference).
pub fn adam_workload(total: usize, tensors: usize) -> (Vec<Tensor<Cpu>>, autograd_optim::Adam<Cpu>) {
    autograd_tensor::manual_seed(0);
    let per = total / tensors;
    let params: Vec<Tensor<Cpu>> = (0..tensors).map(|_| Tensor::randn([per]).requires_grad_(true)).collect();
    for p in &params {
        p.set_grad(Some(Tensor::randn([per])));
    }
    let opt = autograd_optim::Adam::new(params.clone(), autograd_optim::AdamConfig::default()).expect("valid config");
    (params, opt)
}

/// One full training step of a 784-512-512-10 ReLU MLP on a fixed synthetic
/// batch: zero_grad(set_to_none) + forward + cross-entropy + backward + SGD.
pub struct MlpStep<B: Backend> {
    model: autograd_nn::Sequential<B>,
    opt: autograd_optim::Sgd<B>,
    x: Tensor<B>,
    y: Tensor<B>,
}

impl<B: Backend> MlpStep<B> {
    /// The model, an SGD optimizer (lr 0.01) and a batch of `batch` samples.
    pub fn new(batch: usize) -> Self {
        use autograd_nn::ModuleExt;
        autograd_tensor::manual_seed(0);
        let model = autograd_nn::MlpConfig::new(&[784, 512, 512, 10]).init::<B>();
        let opt =
            autograd_optim::Sgd::new(model.parameters(), autograd_optim::SgdConfig { lr: 0.01, ..Default::default() }).expect("valid");
        let x = Tensor::randn([batch, 784]);
        let y = Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect::<Vec<_>>(), [batch]);
        MlpStep { model, opt, x, y }
    }

    fn run(model: &autograd_nn::Sequential<B>, opt: &mut autograd_optim::Sgd<B>, x: &Tensor<B>, y: &Tensor<B>) -> Tensor<B> {
        use autograd_nn::Module;
        use autograd_optim::Optimizer;
        opt.zero_grad(true);
        let logits = model.forward(x);
        let loss =
            autograd_tensor::functional::try_cross_entropy(&logits, y, autograd_tensor::functional::Reduction::Mean, &Default::default())
                .expect("loss");
        loss.backward().expect("backward");
        opt.step().expect("step");
        loss
    }

    /// One step; returns the loss.
    pub fn step(&mut self) -> f32 {
        Self::run(&self.model, &mut self.opt, &self.x, &self.y).to_vec::<f32>()[0]
    }
}

impl<B: Backend> MlpStep<autograd_jit::Traced<B>> {
    /// The same step compiled (`autograd-jit`): each call of the returned
    /// function runs one step (the first eager, the second traced, then
    /// replays) and returns the loss.
    pub fn into_compiled(self) -> Box<dyn FnMut() -> f32> {
        let MlpStep { model, mut opt, x, y } = self;
        let mut step =
            autograd_jit::compile(move |b: &[Tensor<autograd_jit::Traced<B>>]| Ok(vec![Self::run(&model, &mut opt, &b[0], &b[1])]));
        let batch = [x, y];
        Box::new(move || step.run(&batch).expect("step")[0].to_vec::<f32>()[0])
    }
}

/// The delivery-time regression of the lessons (`examples/data/bazarghar.safetensors`:
/// 200 rows, 2 features, a 2-16-1 ReLU network, f64) trained by full-batch
/// gradient descent, `param -= 0.1 * grad` with gradients zeroed each step.
/// The PyTorch and NumPy loops in `compare_pytorch.py` are the same computation.
pub struct DeliveryTime<B: Backend> {
    x: Tensor<B>,
    y: Tensor<B>,
    init: Vec<Tensor<B>>,
}

impl<B: Backend> DeliveryTime<B> {
    /// Loads the shipped data and initial weights.
    pub fn load() -> Self {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/bazarghar.safetensors");
        let mut t: std::collections::HashMap<_, _> =
            autograd_tensor::load_safetensors::<B>(&path).expect("shipped data").tensors.into_iter().collect();
        let mut take = |k: &str| t.remove(k).expect("tensor in the shipped file");
        let (x, y) = (take("X"), take("y"));
        let init = ["W1", "b1", "W2", "b2"].iter().map(|k| take(k)).collect();
        DeliveryTime { x, y, init }
    }

    fn step(x: &Tensor<B>, y: &Tensor<B>, w: &[Tensor<B>]) -> Tensor<B> {
        w.iter().for_each(|p| p.set_grad(None));
        let h = (x.matmul(&w[0]) + &w[1]).relu();
        let loss = (h.matmul(&w[2]) + &w[3] - y).powf(2.0).mean();
        loss.backward().expect("backward");
        autograd_tensor::no_grad(|| {
            for p in w {
                p.sub_(&(p.grad().expect("used") * 0.1));
            }
        });
        loss
    }

    /// `steps` steps from the initial weights; returns the last loss.
    pub fn train(&self, steps: usize) -> f64 {
        let w: Vec<Tensor<B>> = self.init.iter().map(|t| t.deep_clone().requires_grad_(true)).collect();
        let mut last = 0.0;
        for _ in 0..steps {
            last = Self::step(&self.x, &self.y, &w).item();
        }
        last
    }
}

impl<B: Backend> DeliveryTime<autograd_jit::Traced<B>> {
    /// [`DeliveryTime::train`] with the step compiled (`autograd-jit`):
    /// the first call eager, the second traced, the rest replayed.
    pub fn train_compiled(&self, steps: usize) -> f64 {
        self.train_compiled_timed(steps).0
    }

    /// Milliseconds of the first compiled call (the traced one) of a run.
    pub fn first_compiled_call_ms(&self) -> f64 {
        self.train_compiled_timed(3).1
    }

    fn train_compiled_timed(&self, steps: usize) -> (f64, f64) {
        let w: Vec<Tensor<autograd_jit::Traced<B>>> = self.init.iter().map(|t| t.deep_clone().requires_grad_(true)).collect();
        let mut step = autograd_jit::compile(|b: &[Tensor<autograd_jit::Traced<B>>]| Ok(vec![Self::step(&b[0], &b[1], &w)]));
        let batch = [self.x.clone(), self.y.clone()];
        let (mut last, mut traced_ms) = (0.0, 0.0);
        for i in 0..steps {
            let t = Instant::now();
            last = step.run(&batch).expect("step")[0].item();
            if i == 1 {
                traced_ms = t.elapsed().as_secs_f64() * 1e3;
            }
        }
        (last, traced_ms)
    }
}

/// The 2,000-op scalar chain of [`autograd_chain`] as a compiled step
/// (input `x`, output `x.grad`).
pub struct CompiledChain {
    step: Box<dyn FnMut() -> f32>,
}

impl CompiledChain {
    /// Compiles the chain of `n` ops (traced on the second [`CompiledChain::run`]).
    pub fn new(n: usize) -> Self {
        type T = Tensor<autograd_jit::Traced<Cpu>>;
        let c1 = T::from_vec(vec![1.0001f32], [1]);
        let c2 = T::from_vec(vec![0.5f32], [1]);
        let mut step = autograd_jit::compile(move |b: &[T]| {
            let x = b[0].detach().requires_grad_(true);
            let mut y = x.clone();
            for i in 0..n {
                y = if i % 2 == 0 { &y * &c1 } else { &y + &c2 };
            }
            y.sum().backward()?;
            Ok(vec![x.grad().expect("grad")])
        });
        let x = T::from_vec(vec![1.0f32], [1]);
        CompiledChain { step: Box::new(move || step.run(std::slice::from_ref(&x)).expect("step")[0].item() as f32) }
    }
    /// One run of the chain and its backward; returns `x.grad`.
    pub fn run(&mut self) -> f32 {
        (self.step)()
    }
}

/// A convolutional training step for the `cnn` comparison: SGD (lr 0.01)
/// on a fixed batch, cross-entropy over 10 classes.
pub struct CnnStep<B: Backend> {
    model: autograd_nn::Sequential<B>,
    opt: autograd_optim::Sgd<B>,
    x: Tensor<B>,
    y: Tensor<B>,
}

/// A ResNet basic block (two 3x3 convolutions 64 -> 64 without bias, each
/// followed by BatchNorm2d, ReLU after the first and after the residual sum).
#[derive(autograd_nn::Module)]
pub struct BasicBlock<B: Backend> {
    conv1: autograd_nn::Conv2d<B>,
    bn1: autograd_nn::BatchNorm2d<B>,
    conv2: autograd_nn::Conv2d<B>,
    bn2: autograd_nn::BatchNorm2d<B>,
}

impl<B: Backend> BasicBlock<B> {
    /// `channels -> channels`, stride 1.
    pub fn new(channels: usize) -> Self {
        let conv = || autograd_nn::Conv2dConfig::new(channels, channels, [3, 3]).with_padding([1, 1]).with_bias(false).init::<B>();
        BasicBlock {
            conv1: conv(),
            bn1: autograd_nn::BatchNorm2d::new(channels),
            conv2: conv(),
            bn2: autograd_nn::BatchNorm2d::new(channels),
        }
    }
}

impl<B: Backend> autograd_nn::Module<B> for BasicBlock<B> {
    fn try_forward(&self, x: &Tensor<B>) -> autograd_core::Result<Tensor<B>> {
        let h = self.bn1.try_forward(&self.conv1.try_forward(x)?)?.try_relu()?;
        let h = self.bn2.try_forward(&self.conv2.try_forward(&h)?)?;
        h.try_add(x)?.try_relu()
    }
}

impl<B: Backend> CnnStep<B> {
    /// The ResNet basic block at batch 32 on 64 x 32 x 32 inputs, followed
    /// by global average pooling and a 64 -> 10 linear layer for the loss.
    pub fn resnet_block(batch: usize) -> Self {
        autograd_tensor::manual_seed(0);
        let model = autograd_nn::Sequential::new()
            .add(BasicBlock::<B>::new(64))
            .add(autograd_nn::AdaptiveAvgPool2d { output_size: [1, 1] })
            .add(autograd_nn::Flatten::default())
            .add(autograd_nn::Linear::new(64, 10));
        Self::with(model, Tensor::randn([batch, 64, 32, 32]), batch)
    }

    /// The `digits_cnn` example's LeNet-like network on a batch of 8x8 images.
    pub fn lenet(batch: usize) -> Self {
        autograd_tensor::manual_seed(0);
        Self::with(examples::digits::lenet::<B>(), Tensor::rand([batch, 64]), batch)
    }

    fn with(model: autograd_nn::Sequential<B>, x: Tensor<B>, batch: usize) -> Self {
        use autograd_nn::ModuleExt;
        let opt =
            autograd_optim::Sgd::new(model.parameters(), autograd_optim::SgdConfig { lr: 0.01, ..Default::default() }).expect("valid");
        let y = Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect::<Vec<_>>(), [batch]);
        CnnStep { model, opt, x, y }
    }

    /// One step; returns the loss.
    pub fn step(&mut self) -> f32 {
        MlpStep::run(&self.model, &mut self.opt, &self.x, &self.y).to_vec::<f32>()[0]
    }
}

/// The `rnn` comparison: forward and backward (of the output's sum) of a
/// 2-layer LSTM, input 128, hidden 256, on a sequence of 64 steps, batch 32.
pub struct LstmStep<B: Backend> {
    lstm: autograd_nn::LSTM<B>,
    x: Tensor<B>,
}

impl<B: Backend> LstmStep<B> {
    /// The layer and its input `(64, 32, 128)`.
    pub fn new() -> Self {
        autograd_tensor::manual_seed(0);
        let lstm = autograd_nn::RecurrentConfig::lstm(128, 256).with_num_layers(2).init::<B>();
        LstmStep { lstm, x: Tensor::randn([64, 32, 128]).requires_grad_(true) }
    }
    /// One forward and backward; returns the output's sum.
    pub fn step(&mut self) -> f32 {
        use autograd_nn::{Module, ModuleExt};
        self.lstm.zero_grad(true);
        let s = self.lstm.forward(&self.x).sum();
        s.backward().expect("backward");
        s.to_vec::<f32>()[0]
    }
}

impl<B: Backend> Default for LstmStep<B> {
    fn default() -> Self {
        Self::new()
    }
}
