//! Convolution and pooling layers against PyTorch: each case of
//! `autograd-testkit/fixtures/conv/conv.safetensors` (made by
//! `make_fixtures.py` beside it, PyTorch 2.15) rebuilt here with the same
//! configuration, PyTorch's state dict loaded strictly, the output and
//! every gradient compared (float64 at 1e-10, float32 at 1e-5), on every
//! backend; gradients of every order against central differences.

use autograd_core::{Backend, DType};
use autograd_nn::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, Conv1dConfig, Conv2dConfig, ConvPadding, ConvTranspose1dConfig,
    ConvTranspose2dConfig, MaxPool1d, MaxPool2d, Module, ModuleExt, PaddingMode,
};
use autograd_tensor::Tensor;
use autograd_tensor::autograd::{gradcheck, gradgradcheck};
use autograd_tensor::functional::{self as F, PoolOptions};
use fixture_case::Case;

mod fixture_case;

/// A case of `conv/conv.safetensors` checked as a one-input module: the
/// state dict loaded strictly, the output and every gradient compared.
fn check<B: Backend, M: Module<B> + ModuleExt<B>>(name: &'static str, mut m: M) {
    let c = Case::<B>::load("conv/conv.safetensors", name);
    c.load_into(&mut m);
    let x = c.input("x");
    let out = m.forward(&x);
    c.check(&m, &[("out", &out)], &[("x", &x)]);
}

fn f64c2(i: usize, o: usize, k: [usize; 2]) -> Conv2dConfig {
    Conv2dConfig::new(i, o, k).with_dtype(DType::F64)
}

fn convolutions<B: Backend>() {
    check::<B, _>("conv2d_basic", f64c2(3, 4, [3, 3]).init::<B>());
    check::<B, _>("conv2d_stride_pad", f64c2(3, 5, [3, 2]).with_stride([2, 1]).with_padding([1, 2]).init::<B>());
    check::<B, _>("conv2d_dilation", f64c2(2, 3, [3, 3]).with_padding([2, 2]).with_dilation([2, 2]).with_bias(false).init::<B>());
    check::<B, _>("conv2d_groups", f64c2(4, 6, [3, 3]).with_groups(2).init::<B>());
    check::<B, _>("conv2d_depthwise", f64c2(3, 3, [3, 3]).with_groups(3).with_padding([1, 1]).init::<B>());
    check::<B, _>("conv2d_same", f64c2(2, 3, [4, 3]).with_padding_kind(ConvPadding::Same).with_dilation([1, 2]).init::<B>());
    check::<B, _>("conv2d_valid_unbatched", f64c2(3, 2, [2, 2]).with_padding_kind(ConvPadding::Valid).init::<B>());
    check::<B, _>("conv2d_reflect", f64c2(2, 3, [3, 3]).with_padding([2, 2]).with_padding_mode(PaddingMode::Reflect).init::<B>());
    check::<B, _>("conv2d_replicate", f64c2(2, 3, [3, 3]).with_padding([1, 2]).with_padding_mode(PaddingMode::Replicate).init::<B>());
    check::<B, _>(
        "conv2d_circular",
        f64c2(2, 3, [3, 3]).with_padding([1, 1]).with_stride([2, 2]).with_padding_mode(PaddingMode::Circular).init::<B>(),
    );
    check::<B, _>("conv2d_f32", Conv2dConfig::new(3, 8, [3, 3]).with_padding([1, 1]).init::<B>());
    check::<B, _>(
        "conv1d",
        Conv1dConfig::new(3, 5, [4]).with_stride([3]).with_padding([2]).with_dilation([2]).with_dtype(DType::F64).init::<B>(),
    );
    check::<B, _>(
        "conv1d_groups_circular",
        Conv1dConfig::new(4, 2, [3])
            .with_groups(2)
            .with_padding([1])
            .with_padding_mode(PaddingMode::Circular)
            .with_dtype(DType::F64)
            .init::<B>(),
    );
    check::<B, _>(
        "conv_transpose2d",
        ConvTranspose2dConfig::new(4, 3, [3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_output_padding([1, 1])
            .with_dtype(DType::F64)
            .init::<B>(),
    );
    check::<B, _>(
        "conv_transpose2d_groups",
        ConvTranspose2dConfig::new(4, 2, [2, 2]).with_groups(2).with_dilation([2, 2]).with_bias(false).with_dtype(DType::F64).init::<B>(),
    );
    check::<B, _>("conv_transpose1d", ConvTranspose1dConfig::new(3, 2, [3]).with_stride([2]).with_dtype(DType::F64).init::<B>());
}

fn batchnorm2d<B: Backend>() {
    use autograd_nn::BatchNorm2dConfig;
    let bn = || BatchNorm2dConfig::new(3).with_dtype(DType::F64);
    check::<B, _>("batchnorm2d", bn().init::<B>());
    check::<B, _>("batchnorm2d_cumulative", bn().with_momentum(None).init::<B>());
    let eval = BatchNorm2dConfig::new(2).with_dtype(DType::F64).init::<B>();
    eval.set_training(false);
    check::<B, _>("batchnorm2d_eval", eval);
}

fn resampling<B: Backend>() {
    use F::{InterpolateMode::*, InterpolateSize::*};
    use autograd_nn::{AdaptiveMaxPool2d, Upsample};
    check::<B, _>("adaptive_max_pool2d", AdaptiveMaxPool2d { output_size: [3, 2] });
    let up = |size, mode, align_corners| Upsample { size, mode, align_corners };
    check::<B, _>("upsample_nearest_size", up(Size(vec![5, 7]), Nearest, false));
    check::<B, _>("upsample_nearest_scale", up(ScaleFactor(vec![2.0]), Nearest, false));
    check::<B, _>("upsample_bilinear", up(Size(vec![5, 7]), Linear, false));
    check::<B, _>("upsample_bilinear_corners", up(ScaleFactor(vec![1.5]), Linear, true));
    check::<B, _>("upsample_bilinear_scale", up(ScaleFactor(vec![1.7, 2.5]), Linear, false));
    check::<B, _>("upsample_linear", up(Size(vec![9]), Linear, false));
}

fn normalisations<B: Backend>() {
    use autograd_nn::{GroupNorm, InstanceNorm1d, InstanceNorm2d, RMSNorm};
    check::<B, _>("group_norm", GroupNorm::<B>::try_new(2, 6, 1e-5, true, DType::F64).unwrap());
    check::<B, _>("group_norm_no_affine", GroupNorm::<B>::try_new(3, 3, 1e-5, false, DType::F64).unwrap());
    check::<B, _>("instance_norm2d_affine", InstanceNorm2d::<B>::try_new(3, 1e-5, true, DType::F64).unwrap());
    check::<B, _>("instance_norm1d", InstanceNorm1d::<B>::try_new(4, 1e-5, false, DType::F64).unwrap());
    // running statistics: the instances' statistics averaged over the batch mixed in, then used in evaluation
    use autograd_nn::{InstanceNorm1dConfig, InstanceNorm2dConfig};
    let tracked = InstanceNorm2dConfig::new(3).with_affine(true).with_track_running_stats(true).with_dtype(DType::F64);
    check::<B, _>("instance_norm2d_tracked", tracked.init::<B>());
    let cumulative = InstanceNorm1dConfig::new(2).with_momentum(None).with_track_running_stats(true).with_dtype(DType::F64);
    check::<B, _>("instance_norm1d_tracked_cumulative", cumulative.init::<B>());
    let eval = InstanceNorm2dConfig::new(2).with_affine(true).with_track_running_stats(true).with_dtype(DType::F64).init::<B>();
    eval.set_training(false);
    check::<B, _>("instance_norm2d_tracked_eval", eval);
    // one spatial element in training: an Err (as PyTorch), the running statistics untouched
    let one = InstanceNorm1dConfig::new(2).with_track_running_stats(true).init::<B>();
    assert!(one.try_forward(&Tensor::<B>::ones([3, 2, 1])).is_err());
    assert_eq!(one.running_var.as_ref().unwrap().to_vec::<f32>(), vec![1.0, 1.0]);
    check::<B, _>("rms_norm", RMSNorm::<B>::try_new(&[5], None, true, DType::F64).unwrap());
    check::<B, _>("rms_norm_eps_2d", RMSNorm::<B>::try_new(&[3, 5], Some(1e-3), true, DType::F64).unwrap());
    check::<B, _>("rms_norm_f32", RMSNorm::<B>::new(&[8]));
}

fn pooling<B: Backend>() {
    let p = PoolOptions::new;
    check::<B, _>("max_pool2d", MaxPool2d::with_options(p(&[3]).with_stride(&[2]).with_padding(&[1])));
    check::<B, _>("max_pool2d_ceil_indices", MaxPool2d::with_options(p(&[2]).with_ceil_mode(true)));
    check::<B, _>("max_pool2d_dilation", MaxPool2d::with_options(p(&[2, 3]).with_stride(&[1, 2]).with_dilation(&[2]).with_padding(&[1])));
    check::<B, _>("max_pool1d_ceil", MaxPool1d::with_options(p(&[3]).with_stride(&[2]).with_ceil_mode(true)));
    check::<B, _>("max_pool2d_ties", MaxPool2d::new(&[2]));
    check::<B, _>("avg_pool2d", AvgPool2d::with_options(p(&[3]).with_stride(&[2]).with_padding(&[1])));
    check::<B, _>(
        "avg_pool2d_exclude_pad_ceil",
        AvgPool2d::with_options(p(&[3]).with_stride(&[2]).with_padding(&[1]).with_ceil_mode(true).with_count_include_pad(false)),
    );
    check::<B, _>("avg_pool2d_divisor", AvgPool2d::with_options(p(&[2, 3]).with_stride(&[1]).with_divisor_override(Some(5))));
    check::<B, _>("avg_pool1d_ceil", AvgPool1d::with_options(p(&[4]).with_stride(&[3]).with_padding(&[2]).with_ceil_mode(true)));
    check::<B, _>("adaptive_avg_pool2d", AdaptiveAvgPool2d { output_size: [3, 2] });
    check::<B, _>("adaptive_avg_pool1d", AdaptiveAvgPool1d { output_size: 4 });
    // return_indices: PyTorch's flat indices into each plane
    let c = Case::<B>::load("conv/conv.safetensors", "max_pool2d_ceil_indices");
    let (_, idx) = MaxPool2d::with_options(p(&[2]).with_ceil_mode(true)).try_forward_with_indices(&c.get("in/x")).unwrap();
    assert_eq!(idx.dtype(), DType::I64);
    assert_eq!(idx.to_vec::<i64>(), c.get("out/indices").to_vec::<i64>());
}

/// Gradients of every order of the window ops against f64 central
/// differences: conv2d (stride, padding, dilation, groups), conv_transpose,
/// max and average pooling.
fn gradients_match_central_differences<B: Backend>() {
    let t = |dims: &[usize], seed: u64| {
        let n: usize = dims.iter().product();
        let v: Vec<f64> = (0..n).map(|i| ((i as f64 + 1.0) * 0.37 + seed as f64).sin()).collect();
        Tensor::<B>::from_vec(v, dims.to_vec()).requires_grad_(true)
    };
    let (x, w, b) = (t(&[1, 4, 5, 4], 1), t(&[2, 2, 2, 3], 2), t(&[2], 3));
    let opts =
        F::ConvOptions::default().with_stride(&[2, 1]).with_padding(F::Padding::Explicit(vec![1, 2])).with_dilation(&[1, 2]).with_groups(2);
    let conv = |v: &[Tensor<B>]| F::conv2d(&v[0], &v[1], Some(&v[2]), &opts);
    gradcheck(conv, &[x.clone(), w.clone(), b.clone()], 1e-6, 1e-7, 1e-6).unwrap();
    gradgradcheck(conv, &[x.clone(), w.clone(), b.clone()], 1e-6, 1e-6, 1e-5).unwrap();
    let wt = t(&[4, 1, 3, 2], 4);
    let topts = F::ConvTransposeOptions::default().with_stride(&[2]).with_padding(&[1]).with_output_padding(&[1]).with_groups(2);
    let convt = |v: &[Tensor<B>]| F::conv_transpose2d(&v[0], &v[1], None, &topts);
    gradcheck(convt, &[x.clone(), wt.clone()], 1e-6, 1e-7, 1e-6).unwrap();
    gradgradcheck(convt, &[x.clone(), wt], 1e-6, 1e-6, 1e-5).unwrap();
    let maxp = |v: &[Tensor<B>]| F::max_pool2d(&v[0], &PoolOptions::new(&[2, 3]).with_stride(&[1]).with_padding(&[1]));
    gradcheck(maxp, std::slice::from_ref(&x), 1e-6, 1e-7, 1e-6).unwrap();
    let avgp = |v: &[Tensor<B>]| {
        F::avg_pool2d(
            &v[0],
            &PoolOptions::new(&[3]).with_stride(&[2]).with_padding(&[1]).with_ceil_mode(true).with_count_include_pad(false),
        )
    };
    gradcheck(avgp, std::slice::from_ref(&x), 1e-6, 1e-7, 1e-6).unwrap();
    gradgradcheck(avgp, std::slice::from_ref(&x), 1e-6, 1e-6, 1e-5).unwrap();
}

/// Bad arguments are `Err`s naming the op and the shapes, never panics.
fn errors_name_the_op<B: Backend>() {
    let x = Tensor::<B>::ones([2, 3, 5, 5]);
    let w = Tensor::<B>::ones([4, 3, 7, 7]);
    let e = F::try_conv2d(&x, &w, None, &F::ConvOptions::default()).unwrap_err().to_string();
    assert!(e.contains("conv2d") && e.contains("kernel"), "{e}");
    let e = F::try_conv2d(&Tensor::<B>::ones([3, 5]), &Tensor::<B>::ones([4, 3, 3, 3]), None, &F::ConvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d") && e.contains("[3, 5]"), "{e}");
    let e = F::try_conv2d(&Tensor::<B>::ones([2, 3, 5]), &Tensor::<B>::ones([4, 3, 3, 3]), None, &F::ConvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d") && e.contains("[2, 3, 5]") && e.contains("channels"), "{e}");
    let e = F::try_conv2d(&x, &Tensor::<B>::ones([4, 3, 3, 3]), Some(&Tensor::<B>::ones([3])), &F::ConvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bias"), "{e}");
    let same = F::ConvOptions::default().with_padding(F::Padding::Same).with_stride(&[2]);
    assert!(F::try_conv2d(&x, &Tensor::<B>::ones([4, 3, 3, 3]), None, &same).is_err());
    assert!(F::try_conv2d(&x, &Tensor::<B>::ones([4, 3, 3, 3]), None, &F::ConvOptions::default().with_stride(&[0])).is_err());
    assert!(F::try_max_pool2d(&x, &PoolOptions::new(&[6])).is_err());
    assert!(F::try_max_pool2d(&x, &PoolOptions::new(&[2]).with_padding(&[2])).is_err());
    assert!(F::try_avg_pool2d(&x, &PoolOptions::new(&[2]).with_divisor_override(Some(0))).is_err());
    assert!(F::try_pad(&x, &[5, 0], F::PadMode::Reflect).is_err());
    // sizes that overflow are Errs
    let huge = F::ConvOptions::default().with_padding(F::Padding::Explicit(vec![usize::MAX / 2]));
    assert!(F::try_conv2d(&x, &Tensor::<B>::ones([4, 3, 3, 3]), None, &huge).is_err());
    assert!(F::try_unfold(&x, &[usize::MAX], &[usize::MAX], &[0], &[1]).is_err());
    assert!(F::try_interpolate(&x, &F::InterpolateSize::Size(vec![usize::MAX / 2]), F::InterpolateMode::Linear, false).is_err());
    assert!(F::try_interpolate(&x, &F::InterpolateSize::ScaleFactor(vec![1e300]), F::InterpolateMode::Nearest, false).is_err());
    assert!(F::try_adaptive_avg_pool2d(&x, [usize::MAX / 2, 3]).is_err());
    assert!(F::try_adaptive_max_pool2d(&x, [usize::MAX / 2, 3]).is_err());
    assert!(F::try_pad(&x, &[usize::MAX / 4, 0], F::PadMode::Replicate).is_err());
    // a zero kernel size is an Err before any size arithmetic
    assert!(F::try_conv2d(&x, &Tensor::<B>::ones([4, 3, 0, 3]), None, &F::ConvOptions::default().with_padding(F::Padding::Same)).is_err());
    assert!(F::try_conv_transpose2d(&x, &Tensor::<B>::ones([3, 2, 0, 2]), None, &F::ConvTransposeOptions::default()).is_err());
    // PyTorch allows an adaptive output larger than the input (overlapping windows)
    assert_eq!(F::adaptive_max_pool2d(&x, [7, 6]).dims(), &[2, 3, 7, 6]);
    // an empty batch is an empty output
    let y = F::conv2d(&Tensor::<B>::ones([0, 3, 5, 5]), &Tensor::<B>::ones([4, 3, 3, 3]), None, &F::ConvOptions::default());
    assert_eq!(y.dims(), &[0, 4, 3, 3]);
    // no input channels: the bias alone (PyTorch gives the same); no output channels: an empty output
    let b = Tensor::<B>::from_vec(vec![1.0f32, 2.0], [2]);
    let y = F::conv2d(&Tensor::<B>::ones([1, 0, 4, 4]), &Tensor::<B>::ones([2, 0, 3, 3]), Some(&b), &F::ConvOptions::default());
    assert_eq!((y.dims(), y.to_vec::<f32>()[..4].to_vec()), (&[1, 2, 2, 2][..], vec![1.0; 4]));
    assert_eq!(F::conv2d(&x, &Tensor::<B>::ones([0, 3, 3, 3]), None, &F::ConvOptions::default()).dims(), &[2, 0, 3, 3]);
    assert_eq!(F::max_pool2d(&Tensor::<B>::ones([2, 0, 4, 4]), &PoolOptions::new(&[2])).dims(), &[2, 0, 2, 2]);
    assert_eq!(F::avg_pool2d(&Tensor::<B>::ones([0, 3, 4, 4]), &PoolOptions::new(&[2])).dims(), &[0, 3, 2, 2]);
    assert_eq!(F::group_norm(&Tensor::<B>::ones([0, 4, 3, 3]), 2, None, None, 1e-5).dims(), &[0, 4, 3, 3]);
}

/// Forward mode through a convolution: the JVP is the convolution of the
/// tangent (linear in the input), checked against central differences.
fn forward_mode_matches_differences<B: Backend>() {
    let x = Tensor::<B>::from_vec((0..32).map(|i| (i as f64 * 0.3).cos()).collect::<Vec<_>>(), [1, 2, 4, 4]);
    let w = Tensor::<B>::from_vec((0..36).map(|i| (i as f64 * 0.7).sin()).collect::<Vec<_>>(), [2, 2, 3, 3]);
    let v = Tensor::<B>::from_vec((0..32).map(|i| (i as f64 * 0.11).sin()).collect::<Vec<_>>(), [1, 2, 4, 4]);
    let f = |x: &Tensor<B>| {
        F::max_pool2d(&F::conv2d(x, &w, None, &F::ConvOptions::default().with_padding(F::Padding::Same)).tanh(), &PoolOptions::new(&[2]))
    };
    let jvp = f(&Tensor::make_dual(&x, &v).unwrap()).tangent().expect("a tangent");
    let eps = 1e-6;
    let (p, m) = (f(&(&x + &(&v * eps))), f(&(&x - &(&v * eps))));
    let numeric = (&p - &m) / (2.0 * eps);
    for (a, n) in jvp.to_vec_f64().iter().zip(numeric.to_vec_f64()) {
        assert!((a - n).abs() < 1e-7, "{a} vs {n}");
    }
}

/// Under `autocast(BF16)` a convolution runs in bf16 (PyTorch's CPU policy
/// lists conv2d as lower precision): its output is bf16 and within bf16's
/// rounding of the f32 convolution; its gradients reach the f32 weights.
fn autocast_runs_convolutions_in_bf16<B: Backend>() {
    use autograd_tensor::autocast::autocast;
    let x = Tensor::<B>::from_vec((0..2 * 3 * 6 * 6).map(|i| ((i as f32) * 0.37).sin()).collect::<Vec<_>>(), [2, 3, 6, 6]);
    let conv = Conv2dConfig::new(3, 4, [3, 3]).with_padding([1, 1]).init::<B>();
    let want = conv.forward(&x);
    let got = autocast(DType::BF16, || conv.try_forward(&x)).unwrap();
    assert_eq!(got.dtype(), DType::BF16);
    for (g, w) in got.to_vec_f64().iter().zip(want.to_vec_f64()) {
        assert!((g - w).abs() <= 0.02 * (1.0 + w.abs()), "{g} vs {w}");
    }
    got.to_dtype(DType::F32).sum().backward().unwrap();
    assert_eq!(conv.weight.tensor().grad().unwrap().dtype(), DType::F32);
}

/// Images whose columns exceed a chunk (a few MiB each) are lowered a
/// chunk at a time: the output, input and weight gradients equal one
/// im2col over the whole batch and one product (1e-12 in f64), with groups
/// and strides, and an uneven last chunk.
fn large_images_lower_in_chunks<B: Backend>() {
    for (groups, stride) in [(1usize, 1usize), (2, 2)] {
        let (n, c, o, hw) = (3, 4, 4, 190);
        let v = |shape: &[usize], seed: f64| {
            let k: usize = shape.iter().product();
            Tensor::<B>::from_vec((0..k).map(|j| (j as f64 * 0.61 + seed).sin()).collect::<Vec<_>>(), shape.to_vec()).requires_grad_(true)
        };
        let x = v(&[n, c, hw, hw], 1.0);
        let w = v(&[o, c / groups, 3, 3], 2.0);
        let opts = F::ConvOptions::default().with_stride(&[stride]).with_padding(F::Padding::Explicit(vec![1])).with_groups(groups);
        let y = F::conv2d(&x, &w, None, &opts);
        // one im2col over the batch, one product per group
        let cols = F::unfold(&x, &[3], &[1], &[1], &[stride]);
        let l = cols.dims()[2] as isize;
        let cols = cols.reshape(&[n as isize, groups as isize, -1, l]);
        let wm = w.reshape(&[groups as isize, (o / groups) as isize, -1]);
        let want = wm.matmul(&cols).reshape(&y.dims().iter().map(|&d| d as isize).collect::<Vec<_>>());
        let close = |a: Vec<f64>, b: Vec<f64>, what: &str| {
            assert_eq!(a.len(), b.len(), "{what}");
            for (k, (p, q)) in a.iter().zip(&b).enumerate() {
                assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "{what} (groups {groups}): element {k}: {p} vs {q}");
            }
        };
        close(y.to_vec_f64(), want.to_vec_f64(), "output");
        let gout = v(y.dims(), 3.0).detach();
        let grads = |t: &Tensor<B>| {
            autograd_tensor::autograd::grad(
                std::slice::from_ref(t),
                &[x.clone(), w.clone()],
                Some(std::slice::from_ref(&gout)),
                Default::default(),
            )
            .unwrap()
        };
        for (k, (a, b)) in grads(&y).into_iter().zip(grads(&want)).enumerate() {
            close(a.unwrap().to_vec_f64(), b.unwrap().to_vec_f64(), &format!("gradient {k}"));
        }
    }
}

autograd_testkit::for_backends!(
    with_traced: convolutions,
    large_images_lower_in_chunks,
    pooling,
    batchnorm2d,
    normalisations,
    resampling,
    gradients_match_central_differences,
    errors_name_the_op,
    forward_mode_matches_differences,
    autocast_runs_convolutions_in_bf16
);
