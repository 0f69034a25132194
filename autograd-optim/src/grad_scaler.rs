//! Dynamic loss scaling for f16 training: PyTorch's `torch.amp.GradScaler`.
//!
//! f16's smallest normal value is 6e-5: small gradients flush to zero. The
//! scaler multiplies the loss by a large factor before backward (so the
//! gradients are scaled too), divides the gradients back before the step
//! ([`GradScaler::unscale_`], where clipping belongs), skips a step whose
//! gradients hold an inf or NaN, and adapts the factor: halved after an
//! overflow, doubled after `growth_interval` clean steps.
//!
//! The skip decision reads one value on the host per step: a step with a
//! scaler does not compile (tracing it is an `Err` naming the read).

use crate::{Optimizer, OptimizerId};
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::{Tensor, no_grad};
use std::collections::HashMap;

/// A [`GradScaler`]'s settings (PyTorch's defaults from
/// [`GradScalerConfig::new`]).
///
/// ```
/// use autograd_optim::GradScalerConfig;
/// let c = GradScalerConfig::new();
/// assert_eq!((c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval), (65536.0, 2.0, 0.5, 2000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale (2^16).
    pub init_scale: f64,
    /// The factor after `growth_interval` steps without inf/NaN (2).
    pub growth_factor: f64,
    /// The factor after a step with inf/NaN gradients (0.5).
    pub backoff_factor: f64,
    /// Clean steps between growths (2000).
    pub growth_interval: u64,
}

impl GradScalerConfig {
    /// PyTorch's defaults.
    pub fn new() -> Self {
        GradScalerConfig { init_scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000 }
    }
    /// The scaler these settings describe (an `Err` for a scale or factor
    /// PyTorch refuses: growth must exceed 1, backoff lie in (0, 1)).
    pub fn init(&self) -> Result<GradScaler> {
        let bad = |msg: String| Err(Error::msg(format!("GradScaler: {msg}")));
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad(format!("init_scale must be a positive finite number, got {}", self.init_scale));
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad(format!("growth_factor should be > 1, got {}", self.growth_factor));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(format!("backoff_factor should be < 1 and > 0, got {}", self.backoff_factor));
        }
        if self.growth_interval == 0 {
            return bad("growth_interval should be a positive integer".into());
        }
        let state = GradScalerState {
            scale: self.init_scale,
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
            growth_tracker: 0,
        };
        Ok(GradScaler { state, steps: HashMap::new() })
    }
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`GradScaler::state_dict`] saves: PyTorch's keys `scale`,
/// `growth_factor`, `backoff_factor`, `growth_interval`, `_growth_tracker`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerState {
    /// The current scale.
    pub scale: f64,
    /// The factor after `growth_interval` clean steps.
    pub growth_factor: f64,
    /// The factor after a step with inf/NaN gradients.
    pub backoff_factor: f64,
    /// Clean steps between growths.
    pub growth_interval: u64,
    /// Clean steps since the last growth or backoff.
    pub growth_tracker: u64,
}

impl GradScalerState {
    /// PyTorch's state-dict entries, by name.
    pub fn to_pairs(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("scale", self.scale),
            ("growth_factor", self.growth_factor),
            ("backoff_factor", self.backoff_factor),
            ("growth_interval", self.growth_interval as f64),
            ("_growth_tracker", self.growth_tracker as f64),
        ]
    }
    /// Reads PyTorch's entries back (an `Err` naming a missing or invalid one).
    pub fn from_pairs(get: impl Fn(&str) -> Option<f64>) -> Result<Self> {
        let need = |k: &str| get(k).ok_or_else(|| Error::msg(format!("GradScaler state: no `{k}`")));
        let count = |k: &str| -> Result<u64> {
            let v = need(k)?;
            if v < 0.0 || v.fract() != 0.0 || v > u64::MAX as f64 {
                return Err(Error::msg(format!("GradScaler state: `{k}` must be a non-negative integer, got {v}")));
            }
            Ok(v as u64)
        };
        let state = GradScalerState {
            scale: need("scale")?,
            growth_factor: need("growth_factor")?,
            backoff_factor: need("backoff_factor")?,
            growth_interval: count("growth_interval")?,
            growth_tracker: count("_growth_tracker")?,
        };
        state.check()?;
        Ok(state)
    }

    /// The checks of a fresh scaler, on a state about to be loaded.
    fn check(&self) -> Result<()> {
        let config = GradScalerConfig {
            init_scale: self.scale,
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
        };
        config.init().map(drop)
    }
}

/// Where one optimizer stands within the current iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Unscaled { found_inf: bool },
    Stepped { found_inf: bool },
}

/// Dynamic loss scaling, PyTorch's `GradScaler`: `scale(loss).backward()`,
/// then `unscale_(opt)` (optional: before clipping), `step(opt)`, `update()`.
///
/// ```
/// use autograd_core::{DType, RefBackend};
/// use autograd_optim::{GradScalerConfig, Optimizer, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f32], [1]).requires_grad_(true);
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
/// let mut scaler = GradScalerConfig::new().init().unwrap();
/// let loss = (&w * 3.0).sum();
/// scaler.scale(&loss).unwrap().backward().unwrap();
/// assert_eq!(w.grad().unwrap().to_vec_f64(), vec![3.0 * 65536.0]);
/// assert!(scaler.step(&mut opt).unwrap(), "stepped: the gradients were finite");
/// scaler.update().unwrap();
/// assert!((w.to_vec_f64()[0] - 0.7).abs() < 1e-6); // 1 - 0.1 * 3, unscaled
/// ```
#[derive(Clone, Debug)]
pub struct GradScaler {
    state: GradScalerState,
    /// Per optimizer (by [`Optimizer::id`], as PyTorch keys by
    /// `id(optimizer)`; an address would change when the optimizer moves),
    /// what this iteration did to it.
    steps: HashMap<OptimizerId, Stage>,
}

impl GradScaler {
    /// The current scale.
    pub fn get_scale(&self) -> f64 {
        self.state.scale
    }

    /// `loss * scale` (a differentiable op; the product is in the loss's
    /// dtype, f32 under autocast).
    #[track_caller]
    pub fn scale<B: Backend>(&self, loss: &Tensor<B>) -> Result<Tensor<B>> {
        loss.try_mul_scalar(self.state.scale)
    }

    /// Divides the gradients of `opt`'s parameters by the scale in place and
    /// notes whether any held an inf or NaN. Call it at most once per
    /// optimizer between [`GradScaler::update`]s (then clip); `step` calls
    /// it when you did not. f16 gradients are an `Err` (PyTorch's
    /// "Attempting to unscale FP16 gradients": keep f32 master weights).
    pub fn unscale_<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, opt: &mut O) -> Result<()> {
        match self.steps.get(&opt.id()) {
            Some(Stage::Unscaled { .. }) => {
                return Err(Error::msg("GradScaler: unscale_() has already been called on this optimizer since the last update()"));
            }
            Some(Stage::Stepped { .. }) => return Err(Error::msg("GradScaler: unscale_() is being called after step()")),
            None => {}
        }
        let grads: Vec<Tensor<B>> = opt.params().iter().filter(|p| p.requires_grad()).filter_map(|p| p.grad()).collect();
        if let Some(g) = grads.iter().find(|g| g.dtype() == DType::F16) {
            return Err(Error::UnsupportedDType {
                op: "GradScaler::unscale_",
                dtype: g.dtype(),
                hint: "attempting to unscale F16 gradients: keep the parameters (master weights) in F32 and run autocast(F16)",
            });
        }
        // One host read for every gradient: 0 * x is NaN exactly when x is
        // inf or NaN, so the sum of those products is NaN iff one is.
        let mut probe: Option<Tensor<B>> = None;
        for g in &grads {
            let p = no_grad(|| g.try_mul_scalar(0.0)?.try_sum()?.try_to_dtype(DType::F64))?;
            probe = Some(match probe {
                Some(acc) => no_grad(|| acc.try_add(&p))?,
                None => p,
            });
        }
        let found_inf = match probe {
            Some(p) => p.try_item()?.is_nan(),
            None => false,
        };
        // PyTorch: inv_scale = (1 / scale in f64) as f32
        let inv = (1.0 / self.state.scale) as f32 as f64;
        for g in &grads {
            no_grad(|| g.try_mul_(&Tensor::try_full_dtype([], inv, g.dtype())?))?;
        }
        self.steps.insert(opt.id(), Stage::Unscaled { found_inf });
        Ok(())
    }

    /// Unscales (unless [`GradScaler::unscale_`] already did) and runs
    /// `opt.step()` unless a gradient held an inf or NaN. Returns whether
    /// the step ran.
    pub fn step<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, opt: &mut O) -> Result<bool> {
        if matches!(self.steps.get(&opt.id()), Some(Stage::Stepped { .. })) {
            return Err(Error::msg("GradScaler: step() has already been called since the last update()"));
        }
        if !self.steps.contains_key(&opt.id()) {
            self.unscale_(opt)?;
        }
        let Some(&Stage::Unscaled { found_inf }) = self.steps.get(&opt.id()) else { unreachable!("unscaled above") };
        if !found_inf {
            opt.step()?;
        }
        self.steps.insert(opt.id(), Stage::Stepped { found_inf });
        Ok(!found_inf)
    }

    /// Adapts the scale after this iteration's steps: times `backoff_factor`
    /// if any optimizer saw an inf or NaN, times `growth_factor` after
    /// `growth_interval` clean iterations in a row (when the result stays
    /// finite). An `Err` if no `step` ran since the last update.
    pub fn update(&mut self) -> Result<()> {
        if self.steps.is_empty() {
            return Err(Error::msg("GradScaler: no inf checks were recorded prior to update(): call step() first"));
        }
        let found_inf = self.steps.values().any(|s| matches!(s, Stage::Unscaled { found_inf: true } | Stage::Stepped { found_inf: true }));
        self.steps.clear();
        let s = &mut self.state;
        if found_inf {
            s.scale *= s.backoff_factor;
            s.growth_tracker = 0;
        } else {
            s.growth_tracker += 1;
            if s.growth_tracker == s.growth_interval {
                let grown = s.scale * s.growth_factor;
                if grown.is_finite() {
                    s.scale = grown;
                }
                s.growth_tracker = 0;
            }
        }
        Ok(())
    }

    /// Sets the scale to `new_scale` (PyTorch's `update(new_scale)`); the
    /// growth count restarts.
    pub fn set_scale(&mut self, new_scale: f64) -> Result<()> {
        if !(new_scale.is_finite() && new_scale > 0.0) {
            return Err(Error::msg(format!("GradScaler: the scale must be a positive finite number, got {new_scale}")));
        }
        self.steps.clear();
        self.state.scale = new_scale;
        self.state.growth_tracker = 0;
        Ok(())
    }

    /// The scale, the settings and the growth count (PyTorch's state dict).
    pub fn state_dict(&self) -> GradScalerState {
        self.state
    }

    /// Resumes from a saved state (validated first: an `Err` changes nothing).
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> Result<()> {
        state.check()?;
        self.state = *state;
        self.steps.clear();
        Ok(())
    }
}
