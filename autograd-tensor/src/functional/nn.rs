//! Layers as functions: linear, layer_norm, batch_norm, embedding, dropout.

use crate::Tensor;
use crate::ops::program::{self, program};
use autograd_core::fusion::ElementwiseProgram;
use autograd_core::{Backend, BinaryOp, DType, Error, Result, Shape, UnaryOp};
use std::panic::Location;
use std::sync::{Arc, OnceLock};

/// `x @ weight^T + bias` with PyTorch's weight layout `[out_features, in_features]`.
///
/// ```
/// use autograd_tensor::{Tensor, functional::try_linear};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [1, 2]);
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0], [3, 2]);
/// assert_eq!(try_linear(&x, &w, None).unwrap().to_vec::<f64>(), vec![1.0, 2.0, 3.0]);
/// ```
#[track_caller]
pub fn try_linear<B: Backend>(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let loc = Location::caller();
    if weight.rank() != 2 || x.rank() == 0 || x.dims()[x.rank() - 1] != weight.dims()[1] {
        return Err(Error::InvalidShape {
            op: "linear",
            msg: format!(
                "input {:?} cannot be multiplied by a weight of shape {:?} ([out_features, in_features])",
                x.shape(),
                weight.shape()
            ),
            location: Some(loc),
        });
    }
    let (in_f, out_f) = (weight.dims()[1], weight.dims()[0]);
    // Under autocast the input is cast (a recorded node: the low-precision
    // copy is the activation saved), while the weight and bias are cast
    // inside the node, unrecorded. A parameter's copy from the region's
    // weight-cast cache is kept for backward (the cache holds it anyway,
    // and PyTorch's graph saves it too); a copy made afresh (cache off,
    // or a weight that is not a parameter) is recast in backward rather
    // than saved.
    let x = &crate::autocast::cast("linear", x)?;
    let (wd, bd) = (crate::autocast::dtype_for("linear", weight.dtype()), bias.map(|b| crate::autocast::dtype_for("linear", b.dtype())));
    let name = match (x.rank(), bias.is_some()) {
        (2, true) => "AddmmBackward0",
        (2, false) => "MmBackward0",
        _ => "LinearBackward0",
    };
    let x_shape = x.shape().clone();
    let rows: usize = x.dims()[..x.rank() - 1].iter().product();
    let inputs: Vec<&Tensor<B>> = [x, weight].into_iter().chain(bias).collect();
    let kept_weight: Arc<OnceLock<Tensor<B>>> = Arc::default();
    let keep = kept_weight.clone();
    let forward = || {
        let (weight, cached) = crate::autocast::cast_unrecorded(weight, wd)?;
        // kept only where backward reads it: `dx = g w` needs x's gradient
        if cached && x.requires_grad() {
            let _ = keep.set(weight.clone());
        }
        let weight = &weight;
        let bias = bias.zip(bd).map(|(b, d)| crate::autocast::cast_unrecorded(b, d).map(|(b, _)| b)).transpose()?;
        let bias = bias.as_ref();
        let cast_inputs: Vec<&Tensor<B>> = [x, weight].into_iter().chain(bias).collect();
        if let Some(y) = fused_addmm(x, weight, bias, &cast_inputs, rows)? {
            return Ok(y);
        }
        let y = x.try_matmul(&weight.try_t()?)?;
        match bias {
            Some(b) => y.try_add(b),
            None => Ok(y),
        }
    };
    // one node: with x and g seen as [rows, in] and [rows, out],
    // dx = g w, dw = g^T x, db = the column sums of g
    let bias_shape = bias.map(|b| b.shape().clone());
    crate::recording::composite(name, &inputs, forward, move |xs, need, g| {
        let g2 = g.try_reshape_to(&Shape::from([rows, out_f]))?;
        let gx = if need[0] {
            // the kept copy has no graph: a backward that is itself
            // recorded (create_graph) casts the weight again to reach it
            let w = match kept_weight.get() {
                Some(w) if !crate::grad_mode::is_grad_enabled() => w.clone(),
                _ => xs[1].try_to_dtype(wd)?,
            };
            Some(g2.try_matmul(&w)?.try_reshape_to(&x_shape)?)
        } else {
            None
        };
        let gw = if need[1] {
            let x2 = xs[0].try_reshape_to(&Shape::from([rows, in_f]))?;
            Some(weight_gradient(&g2, &x2, xs[1].dtype())?)
        } else {
            None
        };
        let mut out = vec![gx, gw];
        if let Some(bs) = &bias_shape {
            out.push(if need[2] { Some(g2.try_sum_dims(&[0], false)?.try_sum_to(bs)?.try_to_dtype(xs[2].dtype())?) } else { None });
        }
        Ok(out)
    })
}

/// `linear`'s `dw = g^T x`, cast to the weight's dtype. A low-precision
/// product for an f32 weight (autocast's) with nothing recording the
/// backward is one backend call, [`Backend::matmul_cast`]: the bits of the
/// product then the cast (PyTorch's `mm` then `ToCopy` backward), without
/// the rounded product kept whole beside its widened copy, which set the
/// peak of a bf16 backward (measured in `examples/checkpoint_memory.rs`).
fn weight_gradient<B: Backend>(g2: &Tensor<B>, x2: &Tensor<B>, dtype: DType) -> Result<Tensor<B>> {
    let gt = g2.try_t()?;
    // a recorded backward (create_graph) or a forward-mode tangent needs the differentiable pieces
    let fused = gt.dtype() == x2.dtype()
        && gt.dtype().is_low_precision()
        && dtype != gt.dtype()
        && !crate::grad_mode::is_grad_enabled()
        && gt.tangent().is_none()
        && x2.tangent().is_none();
    if !fused {
        return gt.try_matmul(x2)?.try_to_dtype(dtype);
    }
    let s = B::matmul_cast(&gt.storage(), gt.layout(), &x2.storage(), x2.layout(), dtype).map_err(|e| e.at(Location::caller()))?;
    Ok(Tensor::from_storage(s, Shape::from([gt.dims()[0], x2.dims()[1]])))
}

/// `x @ weight^T + bias` in one backend call ([`Backend::addmm`]: the bias
/// initialises the product's output, one pass over it fewer), when no input
/// carries a forward-mode tangent (the pieces' JVPs need the unfused path),
/// the dtypes agree and the bias broadcasts over the output's rows.
/// `Ok(None)` leaves the product to the unfused path.
fn fused_addmm<B: Backend>(
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    inputs: &[&Tensor<B>],
    rows: usize,
) -> Result<Option<Tensor<B>>> {
    let Some(b) = bias else { return Ok(None) };
    if inputs.iter().any(|t| t.dtype() != x.dtype() || t.tangent().is_some()) {
        return Ok(None);
    }
    let (in_f, out_f) = (weight.dims()[1], weight.dims()[0]);
    let Ok(lc) = b.layout().broadcast_as(&Shape::from([rows, out_f])) else { return Ok(None) };
    let x2 = x.try_reshape_to(&Shape::from([rows, in_f]))?;
    let wt = weight.layout().transpose(0, 1)?;
    let s = B::addmm(&b.storage(), &lc, &x2.storage(), x2.layout(), &weight.storage(), &wt)?;
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("rank >= 1") = out_f;
    Ok(Some(Tensor::from_storage(s, Shape::new(dims))))
}

/// A normalisation of an f16/bf16 input with f32 parameters (or running
/// statistics): mixed precision, as autocast leaves a norm layer after a
/// product. PyTorch's CPU kernels normalise in f32 and return the input's
/// dtype; so does this: `norm` runs on the input widened to f32 and its
/// result is rounded back. `None` when the dtypes are not that case.
fn in_f32_params<'a, B: Backend + 'a>(
    x: &Tensor<B>,
    mut params: impl Iterator<Item = &'a Tensor<B>> + Clone,
    norm: impl FnOnce(&Tensor<B>) -> Result<Tensor<B>>,
) -> Result<Option<Tensor<B>>> {
    let mixed = x.dtype().is_low_precision() && params.clone().next().is_some() && params.all(|t| t.dtype() == DType::F32);
    if !mixed {
        return Ok(None);
    }
    norm(&x.try_to_dtype(DType::F32)?)?.try_to_dtype(x.dtype()).map(Some)
}

/// Layer normalisation over the trailing `normalized_shape` dims, with the
/// biased variance and `eps` inside the square root, optional affine weight and bias.
#[track_caller]
pub fn try_layer_norm<B: Backend>(
    x: &Tensor<B>,
    normalized_shape: &[usize],
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    eps: f64,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let k = normalized_shape.len();
    if k > x.rank() || x.dims()[x.rank() - k..] != *normalized_shape {
        return Err(Error::InvalidShape {
            op: "layer_norm",
            msg: format!("normalized_shape {normalized_shape:?} does not match the trailing dims of the input {:?}", x.shape()),
            location: Some(loc),
        });
    }
    if let Some(y) = in_f32_params(x, [weight, bias].into_iter().flatten(), |x32| try_layer_norm(x32, normalized_shape, weight, bias, eps))?
    {
        return Ok(y);
    }
    let dims: Vec<isize> = (x.rank() - k..x.rank()).map(|d| d as isize).collect();
    // (x - mean) * rstd and rstd, with the biased variance over `dims`: the
    // backend's fused kernel when nothing needs differentiating through it
    // (the forward, and a backward without create_graph), tensor ops (the
    // same formula) when a graph or a forward-mode tangent must see it
    let normalize = move |x: &Tensor<B>| -> Result<(Tensor<B>, Tensor<B>)> {
        if !crate::is_grad_enabled() && x.tangent().is_none() {
            let (xhat, rstd) = B::layer_norm(&x.storage(), x.layout(), k, eps)?;
            let mut kd = x.dims().to_vec();
            kd[x.rank() - k..].iter_mut().for_each(|d| *d = 1);
            return Ok((Tensor::from_storage(xhat, x.shape().clone()), Tensor::from_storage(rstd, Shape::new(kd))));
        }
        let xc = x.try_sub(&x.try_mean_dims(&dims, true)?)?;
        let rstd = xc.try_mul(&xc)?.try_mean_dims(&dims, true)?.try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?;
        Ok((xc.try_mul(&rstd)?, rstd))
    };
    let norm2 = normalize.clone();
    let forward = || {
        let mut y = normalize(x)?.0;
        if let Some(w) = weight {
            y = y.try_mul(w)?;
        }
        if let Some(b) = bias {
            y = y.try_add(b)?;
        }
        Ok(y)
    };
    let inputs: Vec<&Tensor<B>> = [x].into_iter().chain(weight).chain(bias).collect();
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let lead: Vec<isize> = (0..(x.rank() - k) as isize).collect();
    let inner: Vec<isize> = (x.rank() - k..x.rank()).map(|d| d as isize).collect();
    // one NativeLayerNormBackward0 node: with xhat = (x - mean) rstd and
    // gh = g w, dx = rstd (gh - mean(gh) - xhat mean(gh xhat)) over the
    // normalised dims; dw = sum of g xhat and db = sum of g over the others
    crate::recording::composite("NativeLayerNormBackward0", &inputs, forward, move |xs, need, g| {
        let (xhat, rstd) = norm2(&xs[0])?;
        let gh = if has_w { g.try_mul(&xs[1])? } else { g.clone() };
        let gx = if need[0] { Some(layer_norm_input_grad(&gh, &xhat, &rstd, k, &inner)?) } else { None };
        let over_lead = |t: Tensor<B>| if lead.is_empty() { Ok(t) } else { t.try_sum_dims(&lead, false) };
        let mut out = vec![gx];
        if has_w {
            out.push(if need[1] { Some(over_lead(g.try_mul(&xhat)?)?) } else { None });
        }
        if has_b {
            out.push(if need[out.len()] { Some(over_lead(g.clone())?) } else { None });
        }
        Ok(out)
    })
}

/// [`normalized_input_grad`] over the trailing `k` dims (`dims`): the
/// backend's one-pass kernel when nothing differentiates through the
/// gradient (a backward without `create_graph`, no forward-mode tangent)
/// and the operands share a dtype, the same formula in tensor ops (which
/// promote) otherwise.
fn layer_norm_input_grad<B: Backend>(gh: &Tensor<B>, xhat: &Tensor<B>, rstd: &Tensor<B>, k: usize, dims: &[isize]) -> Result<Tensor<B>> {
    let mixed = xhat.dtype() != gh.dtype() || rstd.dtype() != gh.dtype();
    if mixed || crate::is_grad_enabled() || [gh, xhat, rstd].iter().any(|t| t.tangent().is_some()) {
        return normalized_input_grad(gh, xhat, rstd, dims);
    }
    let dx = B::layer_norm_backward(&gh.storage(), gh.layout(), &xhat.storage(), xhat.layout(), &rstd.storage(), rstd.layout(), k)?;
    Ok(Tensor::from_storage(dx, gh.shape().clone()))
}

/// The gradient through `xhat = (x - mean(x)) * rstd` over `dims` given the
/// gradient `gh` of `xhat`: `rstd (gh - mean(gh) - xhat mean(gh xhat))`
/// (the mean and the variance depend on every element normalised with it).
fn normalized_input_grad<B: Backend>(gh: &Tensor<B>, xhat: &Tensor<B>, rstd: &Tensor<B>, dims: &[isize]) -> Result<Tensor<B>> {
    let m1 = gh.try_mean_dims(dims, true)?;
    let m2 = gh.try_mul(xhat)?.try_mean_dims(dims, true)?;
    gh.try_sub(&m1)?.try_sub(&xhat.try_mul(&m2)?)?.try_mul(rstd)
}

/// The running statistics [`try_batch_norm`] reads in evaluation and updates in
/// training (PyTorch's `running_mean`, `running_var`, `momentum`).
///
/// ```
/// use autograd_tensor::{Tensor, functional::RunningStats};
/// use autograd_core::RefBackend;
/// let (m, v) = (Tensor::<RefBackend>::zeros([3]), Tensor::<RefBackend>::ones([3]));
/// let stats = RunningStats { mean: &m, var: &v, momentum: 0.1 };
/// assert_eq!(stats.momentum, 0.1);
/// ```
pub struct RunningStats<'a, B: Backend> {
    /// `(C,)`, updated in place in training (outside the graph).
    pub mean: &'a Tensor<B>,
    /// `(C,)`, the unbiased batch variance mixed in, updated in place in training.
    pub var: &'a Tensor<B>,
    /// `new = (1 - momentum) * old + momentum * batch` (PyTorch's default 0.1;
    /// a cumulative average passes `1 / num_batches_tracked`).
    pub momentum: f64,
}

// Copy whatever `B` is (a derive would ask `B: Copy`): two references and a number.
impl<B: Backend> Clone for RunningStats<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for RunningStats<'_, B> {}

/// Batch normalisation over every dim but the channels (dim 1) of an input
/// `(N, C, ...)`: PyTorch's `F.batch_norm`. In `training` (or without
/// running statistics) it normalises with the batch's mean and biased
/// variance and, given `running`, mixes the batch mean and the *unbiased*
/// variance into them in place, outside the graph; otherwise it normalises
/// with the running statistics. `weight` and `bias` are `(C,)`. Training on
/// one value per channel is an `Err`, as in PyTorch.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_batch_norm, RunningStats}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 10.0, 3.0, 30.0], [2, 2]);
/// let (m, v) = (Tensor::<RefBackend>::zeros_dtype([2], x.dtype()), Tensor::<RefBackend>::ones_dtype([2], x.dtype()));
/// let y = try_batch_norm(&x, Some(RunningStats { mean: &m, var: &v, momentum: 0.1 }), None, None, true, 0.0).unwrap();
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, -1.0, 1.0, 1.0]);
/// assert_eq!(m.to_vec::<f64>(), vec![0.2, 2.0]); // 0.9 * 0 + 0.1 * mean
/// assert!((v.to_vec::<f64>()[0] - 1.1).abs() < 1e-12); // 0.9 * 1 + 0.1 * 2 (unbiased)
/// assert!(try_batch_norm(&x.narrow(0, 0, 1), None, None, None, true, 1e-5).is_err());
/// ```
#[track_caller]
pub fn try_batch_norm<B: Backend>(
    x: &Tensor<B>,
    running: Option<RunningStats<'_, B>>,
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    training: bool,
    eps: f64,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let err = |msg: String| Error::InvalidShape { op: "batch_norm", msg, location: Some(loc) };
    if x.rank() < 2 {
        return Err(err(format!("expected an input (N, C, ...) of at least 2 dims, got {:?}", x.shape())));
    }
    let c = x.dims()[1];
    let per_channel = [weight, bias].into_iter().flatten().chain(running.iter().flat_map(|r| [r.mean, r.var]));
    if let Some(t) = per_channel.clone().find(|t| t.dims() != [c]) {
        return Err(err(format!("expected per-channel tensors of shape [{c}] for the input {:?}, got {:?}", x.shape(), t.shape())));
    }
    if let Some(y) = in_f32_params(x, per_channel.clone(), |x32| try_batch_norm(x32, running, weight, bias, training, eps))? {
        return Ok(y);
    }
    if let Some(t) = per_channel.clone().find(|t| t.dtype() != x.dtype()) {
        return Err(err(format!("expected per-channel tensors of the input's dtype {:?}, got {:?}", x.dtype(), t.dtype())));
    }
    // (1, C, 1, ...): a per-channel tensor broadcast against the input
    let mut bshape = vec![1; x.rank()];
    bshape[1] = c;
    let bshape = Shape::new(bshape);
    let dims: Vec<isize> = (0..x.rank() as isize).filter(|&d| d != 1).collect();
    let use_batch = training || running.is_none();
    if !use_batch {
        let r = running.expect("running statistics in evaluation");
        let rstd = r.var.detach().try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?.try_reshape_to(&bshape)?;
        let mut y = x.try_sub(&r.mean.detach().try_reshape_to(&bshape)?)?.try_mul(&rstd)?;
        if let Some(w) = weight {
            y = y.try_mul(&w.try_reshape_to(&bshape)?)?;
        }
        return match bias {
            Some(b) => y.try_add(&b.try_reshape_to(&bshape)?),
            None => Ok(y),
        };
    }
    let n = x.numel() / c.max(1);
    if n <= 1 {
        return Err(err(format!("expected more than 1 value per channel when training, got input size {:?}", x.dims())));
    }
    let stats = {
        let dims = dims.clone();
        move |x: &Tensor<B>| -> Result<(Tensor<B>, Tensor<B>, Tensor<B>)> {
            let mean = x.try_mean_dims(&dims, true)?;
            let xc = x.try_sub(&mean)?;
            let var = xc.try_mul(&xc)?.try_mean_dims(&dims, true)?;
            let rstd = var.try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?;
            Ok((xc.try_mul(&rstd)?, mean, var))
        }
    };
    let stats2 = stats.clone();
    let bshape2 = bshape.clone();
    // the batch statistics (mean, 1 / std) when the forward ran its
    // programs: backward reads them instead of recomputing (PyTorch's
    // save_mean and save_invstd)
    let saved: Arc<OnceLock<(Tensor<B>, Tensor<B>)>> = Arc::new(OnceLock::new());
    let saved2 = saved.clone();
    // a per-channel tensor as (1, C, 1, ...), or `fill` where absent
    let per_channel = move |t: Option<&Tensor<B>>, fill: f64, like: &Tensor<B>| match t {
        Some(t) => t.try_reshape_to(&bshape2),
        None => Tensor::try_full_dtype(bshape2.clone(), fill, like.dtype()),
    };
    let per_channel2 = per_channel.clone();
    let dims2 = dims.clone();
    let forward = || {
        let plain = program::plain(&[x].into_iter().chain(weight).chain(bias).collect::<Vec<_>>());
        let (y, mean, var) = if plain {
            // two passes over the input besides the mean: (x - mean)^2 for the
            // variance, then the normalisation and the affine map in one
            let mean = x.try_mean_dims(&dims2, true)?;
            let var = program::run(centered_square(), &[x, &mean])?.remove(0).try_mean_dims(&dims2, true)?;
            let rstd = var.try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?;
            let (w, b) = (per_channel(weight, 1.0, x)?, per_channel(bias, 0.0, x)?);
            let y = program::run(normalize_affine(), &[x, &mean, &rstd, &w, &b])?.remove(0);
            let _ = saved.set((mean.clone(), rstd));
            (y, mean, var)
        } else {
            let (mut y, mean, var) = stats(x)?;
            if let Some(w) = weight {
                y = y.try_mul(&w.try_reshape_to(&bshape)?)?;
            }
            if let Some(b) = bias {
                y = y.try_add(&b.try_reshape_to(&bshape)?)?;
            }
            (y, mean, var)
        };
        if let Some(r) = &running {
            let m = r.momentum;
            let cs = Shape::from([c]);
            let unbiased = var.try_mul_scalar(n as f64 / (n - 1) as f64)?.try_reshape_to(&cs)?;
            r.mean.try_copy_(&r.mean.try_mul_scalar(1.0 - m)?.try_add(&mean.try_reshape_to(&cs)?.try_mul_scalar(m)?)?)?;
            r.var.try_copy_(&r.var.try_mul_scalar(1.0 - m)?.try_add(&unbiased.try_mul_scalar(m)?)?)?;
        }
        Ok(y)
    };
    let inputs: Vec<&Tensor<B>> = [x].into_iter().chain(weight).chain(bias).collect();
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let bshape3 = bshape.clone();
    // one NativeBatchNormBackward0 node, layer_norm's rule over the batch
    // dims: dx = rstd (gh - mean(gh) - xhat mean(gh xhat)) with gh = g w,
    // dw = sum of g xhat and db = sum of g over every dim but the channels
    crate::recording::composite("NativeBatchNormBackward0", &inputs, forward, move |xs, need, g| {
        let mut fast: Vec<&Tensor<B>> = xs.iter().collect();
        fast.push(g);
        if let Some((mean, rstd)) = saved2.get()
            && program::plain(&fast)
        {
            // three passes: the sums of g and of g xhat, then dx
            let sum_g = g.try_sum_dims(&dims, true)?;
            let sum_gx = program::run(centered_product(), &[g, &xs[0], mean, rstd])?.remove(0).try_sum_dims(&dims, true)?;
            let gx = if need[0] {
                let w = per_channel2(if has_w { Some(&xs[1]) } else { None }, 1.0, &xs[0])?;
                let (mg, mgx) = (sum_g.try_div_scalar(n as f64)?, sum_gx.try_div_scalar(n as f64)?);
                Some(program::run(normalized_input_grad_program(), &[g, &xs[0], mean, rstd, &w, &mg, &mgx])?.remove(0))
            } else {
                None
            };
            let cs = Shape::from([c]);
            let mut out = vec![gx];
            if has_w {
                out.push(if need[1] { Some(sum_gx.try_reshape_to(&cs)?) } else { None });
            }
            if has_b {
                out.push(if need[out.len()] { Some(sum_g.try_reshape_to(&cs)?) } else { None });
            }
            return Ok(out);
        }
        let (xhat, _, var) = stats2(&xs[0])?;
        let rstd = var.try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?;
        let gh = if has_w { g.try_mul(&xs[1].try_reshape_to(&bshape3)?)? } else { g.clone() };
        let gx = if need[0] { Some(normalized_input_grad(&gh, &xhat, &rstd, &dims)?) } else { None };
        let mut out = vec![gx];
        if has_w {
            out.push(if need[1] { Some(g.try_mul(&xhat)?.try_sum_dims(&dims, false)?) } else { None });
        }
        if has_b {
            out.push(if need[out.len()] { Some(g.try_sum_dims(&dims, false)?) } else { None });
        }
        Ok(out)
    })
}

/// `(x - m)^2`: inputs `x`, `m`.
fn centered_square() -> &'static ElementwiseProgram {
    use autograd_core::fusion::Instr::{Binary, Unary};
    program!(2, [Binary(BinaryOp::Sub, 0, 1), Unary(UnaryOp::Square, 2)], vec![3])
}

/// `(x - m) rstd w + b`: inputs `x`, `m`, `rstd`, `w`, `b`.
fn normalize_affine() -> &'static ElementwiseProgram {
    use BinaryOp::{Add, Mul, Sub};
    use autograd_core::fusion::Instr::Binary;
    program!(5, [Binary(Sub, 0, 1), Binary(Mul, 5, 2), Binary(Mul, 6, 3), Binary(Add, 7, 4)], vec![8])
}

/// `g (x - m) rstd` (g times the normalised input): inputs `g`, `x`, `m`, `rstd`.
fn centered_product() -> &'static ElementwiseProgram {
    use BinaryOp::{Mul, Sub};
    use autograd_core::fusion::Instr::Binary;
    program!(4, [Binary(Sub, 1, 2), Binary(Mul, 4, 3), Binary(Mul, 0, 5)], vec![6])
}

/// `rstd w (g - mean(g) - xhat mean(g xhat))`, `xhat = (x - m) rstd`:
/// inputs `g`, `x`, `m`, `rstd`, `w`, `mean(g)`, `mean(g xhat)`.
fn normalized_input_grad_program() -> &'static ElementwiseProgram {
    use BinaryOp::{Mul, Sub};
    use autograd_core::fusion::Instr::Binary;
    program!(
        7,
        [
            Binary(Sub, 1, 2),   // 7 x - m
            Binary(Mul, 7, 3),   // 8 xhat
            Binary(Mul, 8, 6),   // 9 xhat mean(g xhat)
            Binary(Sub, 0, 5),   // 10 g - mean(g)
            Binary(Sub, 10, 9),  // 11
            Binary(Mul, 3, 4),   // 12 rstd w
            Binary(Mul, 11, 12), // 13
        ],
        vec![13]
    )
}

/// Rows of `weight` `[num_embeddings, dim]` picked by I64 `indices` of any shape;
/// the result has shape `indices.shape + [dim]`. Gradients add up over repeated indices.
#[track_caller]
pub fn try_embedding<B: Backend>(indices: &Tensor<B>, weight: &Tensor<B>) -> Result<Tensor<B>> {
    let loc = Location::caller();
    if indices.dtype() != DType::I64 || weight.rank() != 2 {
        return Err(Error::InvalidShape {
            op: "embedding",
            msg: format!("expected I64 indices and a 2-D weight, got {:?} indices and weight {:?}", indices.dtype(), weight.shape()),
            location: Some(loc),
        });
    }
    let flat = indices.detach().try_reshape_to(&Shape::from([indices.numel()]))?;
    let mut out = indices.dims().to_vec();
    out.push(weight.dims()[1]);
    let (out, wshape, dim) = (Shape::new(out), weight.shape().clone(), weight.dims()[1]);
    let forward = || weight.try_index_select(0, &flat).map_err(|e| e.renamed("embedding", loc))?.try_reshape_to(&out);
    // one EmbeddingBackward0 node: the rows of g added into the picked rows
    // of a zero weight gradient (repeated indices add up)
    // (the indices are saved with the weight, through SavedTensor)
    crate::recording::composite("EmbeddingBackward0", &[weight, indices], forward, move |xs, _, g| {
        let n = xs[1].numel();
        let idx = xs[1].try_reshape_to(&Shape::from([n, 1]))?.try_expand_to(&Shape::from([n, dim]))?;
        let g2 = g.try_reshape_to(&Shape::from([n, dim]))?;
        Ok(vec![Some(Tensor::try_scatter_add_new(&wshape, 0, &idx, &g2)?), None])
    })
}

/// Zeroes each element with probability `p` and scales the rest by
/// `1 / (1 - p)` when `training`; the identity otherwise. Uses the global
/// generator ([`crate::manual_seed`]), so runs are reproducible.
pub fn try_dropout<B: Backend>(x: &Tensor<B>, p: f64, training: bool) -> Result<Tensor<B>> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::msg(format!("dropout probability has to be between 0 and 1, but got {p}")));
    }
    if !training || p == 0.0 {
        return Ok(x.clone());
    }
    if p == 1.0 {
        return x.try_mul_scalar(0.0);
    }
    let dtype = if x.dtype().is_compute() { x.dtype() } else { DType::F32 };
    let keep = {
        let r = Tensor::<B>::rand_dtype(x.shape().clone(), dtype);
        r.ge_mask(&r.scalar_like(p))?.try_mul_scalar(1.0 / (1.0 - p))?
    };
    x.try_mul(&keep)
}

/// PyTorch's `F.dropout2d`: zeroes whole channels of an `(N, C, H, W)` or
/// unbatched `(C, H, W)` input with probability `p` in training (one draw
/// per channel), scaling the kept ones by `1/(1-p)`; the identity otherwise.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([2, 8, 3, 3]);
/// let y = F::dropout2d(&x, 0.5, true).to_vec::<f32>();
/// // each channel's nine values are all 0 or all 2
/// assert!(y.chunks(9).all(|c| c.iter().all(|&v| v == c[0]) && (c[0] == 0.0 || c[0] == 2.0)));
/// assert_eq!(F::dropout2d(&x, 0.5, false).to_vec::<f32>(), x.to_vec::<f32>());
/// ```
#[track_caller]
pub fn try_dropout2d<B: Backend>(x: &Tensor<B>, p: f64, training: bool) -> Result<Tensor<B>> {
    let loc = Location::caller();
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::msg(format!("dropout probability has to be between 0 and 1, but got {p}")));
    }
    if !(x.rank() == 3 || x.rank() == 4) {
        return Err(Error::InvalidShape {
            op: "dropout2d",
            msg: format!("expected an input (N, C, H, W) or (C, H, W), got {:?}", x.dims()),
            location: Some(loc),
        });
    }
    if !training || p == 0.0 {
        return Ok(x.clone());
    }
    if p == 1.0 {
        return x.try_mul_scalar(0.0);
    }
    let dtype = if x.dtype().is_compute() { x.dtype() } else { DType::F32 };
    let mut mask_shape = x.dims()[..x.rank() - 2].to_vec();
    mask_shape.extend([1, 1]);
    let r = Tensor::<B>::rand_dtype(mask_shape, dtype);
    x.try_mul(&r.ge_mask(&r.scalar_like(p))?.try_mul_scalar(1.0 / (1.0 - p))?)
}
