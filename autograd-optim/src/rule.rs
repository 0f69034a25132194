//! Fused optimizer update rules.
//!
//! An optimizer step is, per parameter tensor, a function of
//! `(param, grad, state buffers, hyper-parameters)` that touches every
//! element once. Writing it as one pass (instead of PyTorch's chain of
//! `mul_`/`addcmul_`/`sqrt`/`addcdiv_`) reads and writes each buffer once,
//! which is what bounds the step on a CPU. The arithmetic follows PyTorch's
//! single-tensor implementations operation by operation, so float64
//! trajectories agree with PyTorch's to rounding.
//!
//! A rule is plain data: it implements core's optimizer-agnostic
//! [`FusedUpdate`](autograd_core::fused_update::FusedUpdate), so a backend runs it through
//! [`autograd_core::Backend::fused_update`] (natively or through its host
//! fallback) without knowing which optimizer it is. Every number of a rule
//! (and its step count) also lives on the device, in the parameter's
//! scalars buffer ([`UpdateRule::scalars`]): the rule a call applies is
//! resolved from it, and the call advances its step count, so eager and
//! compiled steps run the same code and a learning rate set between steps
//! reaches both.

use num_traits::Float;

/// One optimizer step's arithmetic for one parameter tensor, with every
/// hyper-parameter resolved (learning rate after scheduling, step count).
///
/// The state buffers a rule expects, in order, are listed by
/// [`UpdateRule::state_names`].
///
/// ```
/// use autograd_optim::UpdateRule;
/// let rule = UpdateRule::Sgd { lr: 0.1, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0, maximize: false, init_buffer: false };
/// let (mut p, g) = (vec![1.0f64, 2.0], vec![0.5, -1.0]);
/// rule.apply(&mut p, &g, &mut []);
/// assert_eq!(p, vec![0.95, 2.1]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateRule {
    /// Stochastic gradient descent with optional (Nesterov) momentum.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum factor (0: no momentum buffer).
        momentum: f64,
        /// Dampening of the gradient added to the momentum buffer.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Ascend instead of descend.
        maximize: bool,
        /// First step with momentum: the buffer is set to the gradient (no dampening), as in PyTorch.
        init_buffer: bool,
    },
    /// Adam and AdamW.
    Adam {
        /// Learning rate.
        lr: f64,
        /// Decay of the first moment.
        beta1: f64,
        /// Decay of the second moment.
        beta2: f64,
        /// Added to the denominator.
        eps: f64,
        /// Weight decay: L2 penalty (Adam) or decoupled shrinkage (AdamW).
        weight_decay: f64,
        /// AdamW: shrink the parameter by `lr * weight_decay` instead of adding to the gradient.
        decoupled_weight_decay: bool,
        /// Keep the running maximum of the second moment (a third state buffer).
        amsgrad: bool,
        /// Ascend instead of descend.
        maximize: bool,
        /// This step's number, starting at 1 (for the bias corrections).
        step: u64,
    },
    /// RMSprop.
    RmsProp {
        /// Learning rate.
        lr: f64,
        /// Smoothing constant of the squared-gradient average.
        alpha: f64,
        /// Added to the denominator.
        eps: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Momentum factor (0: no momentum buffer).
        momentum: f64,
        /// Normalise by the estimated variance instead of the second moment.
        centered: bool,
        /// Ascend instead of descend.
        maximize: bool,
    },
    /// Adagrad.
    Adagrad {
        /// Learning rate.
        lr: f64,
        /// Learning-rate decay per step.
        lr_decay: f64,
        /// Added to the denominator.
        eps: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Ascend instead of descend.
        maximize: bool,
        /// This step's number, starting at 1.
        step: u64,
    },
}

/// PyTorch's lerp: the formula switches at weight 0.5 to stay exact at both ends.
#[inline(always)]
fn lerp<T: Float>(a: T, b: T, w: T) -> T {
    if w.abs() < T::from(0.5).unwrap() { a + w * (b - a) } else { b - (b - a) * (T::one() - w) }
}

impl UpdateRule {
    /// Names of the state buffers this rule reads and writes, in the order
    /// [`UpdateRule::apply`] expects them (PyTorch's state keys).
    pub fn state_names(&self) -> Vec<&'static str> {
        match *self {
            UpdateRule::Sgd { momentum, .. } => {
                if momentum != 0.0 {
                    vec!["momentum_buffer"]
                } else {
                    vec![]
                }
            }
            UpdateRule::Adam { amsgrad, .. } => {
                if amsgrad {
                    vec!["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
                } else {
                    vec!["exp_avg", "exp_avg_sq"]
                }
            }
            UpdateRule::RmsProp { momentum, centered, .. } => {
                let mut v = vec!["square_avg"];
                if momentum > 0.0 {
                    v.push("momentum_buffer");
                }
                if centered {
                    v.push("grad_avg");
                }
                v
            }
            UpdateRule::Adagrad { .. } => vec!["sum"],
        }
    }

    /// Applies the rule to contiguous slices of equal length: `p` is updated
    /// in place, `states` in the order of [`UpdateRule::state_names`].
    ///
    /// # Panics
    /// If the number of state buffers or a length disagrees (callers check).
    pub fn apply<T: Float>(&self, p: &mut [T], g: &[T], states: &mut [&mut [T]]) {
        let n = p.len();
        assert_eq!(g.len(), n, "optimizer update: gradient length");
        assert_eq!(states.len(), self.state_names().len(), "optimizer update: number of state buffers");
        assert!(states.iter().all(|s| s.len() == n), "optimizer update: state length");
        let c = |x: f64| T::from(x).unwrap();
        let sign = |maximize: bool, g: T| if maximize { -g } else { g };
        match *self {
            UpdateRule::Sgd { lr, momentum, dampening, nesterov, weight_decay, maximize, init_buffer } => {
                let (lr, wd, mom, damp) = (c(-lr), c(weight_decay), c(momentum), c(1.0 - dampening));
                let decay = |g: T, p: T| if weight_decay != 0.0 { g + wd * p } else { g };
                match states {
                    [] => {
                        for (p, &g) in p.iter_mut().zip(g) {
                            let d = decay(sign(maximize, g), *p);
                            *p = *p + lr * d;
                        }
                    }
                    [buf] => {
                        for ((p, &g), b) in p.iter_mut().zip(g).zip(buf.iter_mut()) {
                            let d = decay(sign(maximize, g), *p);
                            *b = if init_buffer { d } else { *b * mom + damp * d };
                            let step = if nesterov { d + mom * *b } else { *b };
                            *p = *p + lr * step;
                        }
                    }
                    _ => unreachable!(),
                }
            }
            UpdateRule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, maximize, step } => {
                let t = step as f64;
                let bc1 = 1.0 - beta1.powf(t);
                let bc2_sqrt = (1.0 - beta2.powf(t)).sqrt();
                let (neg_step_size, bc2_sqrt, eps) = (c(-(lr / bc1)), c(bc2_sqrt), c(eps));
                let (w1, b2, one_m_b2) = (c(1.0 - beta1), c(beta2), c(1.0 - beta2));
                let shrink = c(1.0 - lr * weight_decay);
                let wd = c(weight_decay);
                let (m, rest) = states.split_first_mut().expect("exp_avg");
                let (v, rest) = rest.split_first_mut().expect("exp_avg_sq");
                let (l2, decoupled) = (weight_decay != 0.0 && !decoupled_weight_decay, weight_decay != 0.0 && decoupled_weight_decay);
                // Loop-invariant choices are made here, so the element loop is
                // branch-free and vectorises (zip: no bounds checks).
                let body = |p: &mut T, g: T, m: &mut T, v: &mut T| -> T {
                    let mut g = sign(maximize, g);
                    let mut pi = *p;
                    if decoupled {
                        pi = pi * shrink;
                    }
                    if l2 {
                        g = g + wd * pi;
                    }
                    let mi = lerp(*m, g, w1);
                    *m = mi;
                    *v = *v * b2 + one_m_b2 * (g * g);
                    *p = pi;
                    mi
                };
                let update = |p: &mut T, mi: T, second: T| {
                    let denom = second.sqrt() / bc2_sqrt + eps;
                    *p = *p + neg_step_size * (mi / denom);
                };
                if amsgrad {
                    let vmax = &mut *rest[0];
                    for ((((p, &g), m), v), vm) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()).zip(vmax.iter_mut()) {
                        let mi = body(p, g, m, v);
                        // torch.maximum: a NaN in either propagates
                        // (Float::max would keep the other operand)
                        *vm = if vm.is_nan() || v.is_nan() {
                            T::nan()
                        } else if *vm >= *v {
                            *vm
                        } else {
                            *v
                        };
                        update(p, mi, *vm);
                    }
                } else {
                    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                        let mi = body(p, g, m, v);
                        update(p, mi, *v);
                    }
                }
            }
            UpdateRule::RmsProp { lr, alpha, eps, weight_decay, momentum, centered, maximize } => {
                let (neg_lr, a, w, eps, wd, mom) = (c(-lr), c(alpha), c(1.0 - alpha), c(eps), c(weight_decay), c(momentum));
                let (sq, rest) = states.split_first_mut().expect("square_avg");
                let (mut buf, rest) = if momentum > 0.0 {
                    let (b, r) = rest.split_first_mut().expect("momentum_buffer");
                    (Some(&mut **b), r)
                } else {
                    (None, rest)
                };
                let mut gavg = if centered { Some(&mut *rest[0]) } else { None };
                for i in 0..n {
                    let mut g = sign(maximize, g[i]);
                    if weight_decay != 0.0 {
                        g = g + wd * p[i];
                    }
                    let s = sq[i] * a + w * (g * g);
                    sq[i] = s;
                    let avg = match gavg.as_deref_mut() {
                        Some(ga) => {
                            let m = lerp(ga[i], g, w);
                            ga[i] = m;
                            (s + -(m * m)).sqrt()
                        }
                        None => s.sqrt(),
                    } + eps;
                    match buf.as_deref_mut() {
                        Some(b) => {
                            let x = b[i] * mom + g / avg;
                            b[i] = x;
                            p[i] = p[i] + neg_lr * x;
                        }
                        None => p[i] = p[i] + neg_lr * (g / avg),
                    }
                }
            }
            UpdateRule::Adagrad { lr, lr_decay, eps, weight_decay, maximize, step } => {
                let clr = lr / (1.0 + (step as f64 - 1.0) * lr_decay);
                let (neg_clr, eps, wd) = (c(-clr), c(eps), c(weight_decay));
                let sum = &mut *states[0];
                for i in 0..n {
                    let mut g = sign(maximize, g[i]);
                    if weight_decay != 0.0 {
                        g = g + wd * p[i];
                    }
                    let s = sum[i] + g * g;
                    sum[i] = s;
                    p[i] = p[i] + neg_clr * (g / (s.sqrt() + eps));
                }
            }
        }
    }
}

/// A flag as a scalar.
fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl UpdateRule {
    /// This rule as the values of a scalars buffer, from which
    /// [`FusedUpdate::resolve`](autograd_core::fused_update::FusedUpdate::resolve) gives it back: the steps taken before this
    /// one, whether the state was just created (SGD's momentum buffer is
    /// then set to the gradient), then every hyper-parameter, flags as 0/1.
    ///
    /// ```
    /// use autograd_core::fused_update::FusedUpdate;
    /// use autograd_optim::UpdateRule;
    /// let rule = UpdateRule::Adagrad { lr: 0.1, lr_decay: 0.01, eps: 1e-10, weight_decay: 0.0, maximize: false, step: 3 };
    /// let mut scalars = rule.scalars();
    /// assert_eq!(scalars[0], 2.0);
    /// assert_eq!(rule.resolve(&mut scalars).unwrap(), rule);
    /// assert_eq!(scalars[0], 3.0); // the call counted its step
    /// ```
    pub fn scalars(&self) -> Vec<f64> {
        let before = |step: u64| step.saturating_sub(1) as f64;
        match *self {
            UpdateRule::Sgd { lr, momentum, dampening, nesterov, weight_decay, maximize, init_buffer } => {
                vec![0.0, flag(init_buffer), lr, momentum, dampening, flag(nesterov), weight_decay, flag(maximize)]
            }
            UpdateRule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, maximize, step } => {
                vec![before(step), 0.0, lr, beta1, beta2, eps, weight_decay, flag(decoupled_weight_decay), flag(amsgrad), flag(maximize)]
            }
            UpdateRule::RmsProp { lr, alpha, eps, weight_decay, momentum, centered, maximize } => {
                vec![0.0, 0.0, lr, alpha, eps, weight_decay, momentum, flag(centered), flag(maximize)]
            }
            UpdateRule::Adagrad { lr, lr_decay, eps, weight_decay, maximize, step } => {
                vec![before(step), 0.0, lr, lr_decay, eps, weight_decay, flag(maximize)]
            }
        }
    }

    /// The rule of this kind whose numbers are `s` (as [`UpdateRule::scalars`]
    /// lays them out), at step `step`.
    pub(crate) fn with_scalars(&self, s: &[f64], step: u64, fresh: bool) -> UpdateRule {
        let on = |x: f64| x != 0.0;
        match self {
            UpdateRule::Sgd { .. } => UpdateRule::Sgd {
                lr: s[2],
                momentum: s[3],
                dampening: s[4],
                nesterov: on(s[5]),
                weight_decay: s[6],
                maximize: on(s[7]),
                init_buffer: fresh,
            },
            UpdateRule::Adam { .. } => UpdateRule::Adam {
                lr: s[2],
                beta1: s[3],
                beta2: s[4],
                eps: s[5],
                weight_decay: s[6],
                decoupled_weight_decay: on(s[7]),
                amsgrad: on(s[8]),
                maximize: on(s[9]),
                step,
            },
            UpdateRule::RmsProp { .. } => UpdateRule::RmsProp {
                lr: s[2],
                alpha: s[3],
                eps: s[4],
                weight_decay: s[5],
                momentum: s[6],
                centered: on(s[7]),
                maximize: on(s[8]),
            },
            UpdateRule::Adagrad { .. } => {
                UpdateRule::Adagrad { lr: s[2], lr_decay: s[3], eps: s[4], weight_decay: s[5], maximize: on(s[6]), step }
            }
        }
    }
}
