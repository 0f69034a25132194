//! Black-Scholes call price and its Greeks by autograd (first and second
//! order), next to the closed forms.

use autograd::grad;
use autograd::prelude::*;

/// Market inputs.
#[derive(Clone, Copy, Debug)]
pub struct Market {
    /// Spot.
    pub s: f64,
    /// Strike.
    pub k: f64,
    /// Risk-free rate.
    pub r: f64,
    /// Volatility.
    pub sigma: f64,
    /// Time to expiry in years.
    pub t: f64,
}

/// Price and Greeks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Greeks {
    /// Call price.
    pub price: f64,
    /// dC/dS.
    pub delta: f64,
    /// dC/dsigma.
    pub vega: f64,
    /// dC/dr.
    pub rho: f64,
    /// -dC/dT (value lost per year as time passes).
    pub theta: f64,
    /// d2C/dS2.
    pub gamma: f64,
    /// d2C/dS dsigma.
    pub vanna: f64,
}

impl Greeks {
    /// `(name, value)` for each field, in the order the example prints them.
    ///
    /// ```
    /// let g = examples::greeks::closed_form(examples::greeks::Market { s: 100.0, k: 105.0, r: 0.05, sigma: 0.2, t: 1.0 });
    /// assert_eq!(g.named()[0], ("price", g.price));
    /// ```
    pub fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("price", self.price),
            ("delta", self.delta),
            ("vega", self.vega),
            ("rho", self.rho),
            ("theta", self.theta),
            ("gamma", self.gamma),
            ("vanna", self.vanna),
        ]
    }
}

fn norm_cdf<B: Backend>(x: &Tensor<B>) -> Tensor<B> {
    ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// The call price as a tensor expression of (S, K, r, sigma, T).
pub fn call_price<B: Backend>(s: &Tensor<B>, k: &Tensor<B>, r: &Tensor<B>, sigma: &Tensor<B>, t: &Tensor<B>) -> Tensor<B> {
    let sqrt_t = t.sqrt();
    let d1 = ((s / k).log() + (r + sigma.powf(2.0) * 0.5) * t) / (sigma * &sqrt_t);
    let d2 = &d1 - sigma * &sqrt_t;
    s * norm_cdf(&d1) - k * (-(r * t)).exp() * norm_cdf(&d2)
}

/// Greeks by reverse mode; gamma and vanna by differentiating delta again (`create_graph`).
pub fn by_autograd<B: Backend>(m: Market) -> Result<Greeks> {
    let leaf = |v: f64| Tensor::<B>::scalar(v).requires_grad_(true);
    let (s, k, r, sigma, t) = (leaf(m.s), leaf(m.k), leaf(m.r), leaf(m.sigma), leaf(m.t));
    let c = call_price(&s, &k, &r, &sigma, &t);
    let g = grad(
        std::slice::from_ref(&c),
        &[s.clone(), sigma.clone(), r.clone(), t.clone()],
        None,
        GradOptions { retain_graph: true, create_graph: true, ..Default::default() },
    )?;
    let first = |i: usize| g[i].as_ref().expect("used").item();
    let delta = g[0].clone().expect("used");
    let second = grad(&[delta], &[s.clone(), sigma.clone()], None, GradOptions::default())?;
    Ok(Greeks {
        price: c.item(),
        delta: first(0),
        vega: first(1),
        rho: first(2),
        theta: -first(3),
        gamma: second[0].as_ref().expect("used").item(),
        vanna: second[1].as_ref().expect("used").item(),
    })
}

/// The textbook closed forms.
pub fn closed_form(m: Market) -> Greeks {
    let n = |x: f64| 0.5 * (1.0 + autograd::core::scalar::erf(x / std::f64::consts::SQRT_2));
    let pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let st = m.t.sqrt();
    let d1 = ((m.s / m.k).ln() + (m.r + 0.5 * m.sigma * m.sigma) * m.t) / (m.sigma * st);
    let d2 = d1 - m.sigma * st;
    let disc = (-m.r * m.t).exp();
    Greeks {
        price: m.s * n(d1) - m.k * disc * n(d2),
        delta: n(d1),
        vega: m.s * pdf(d1) * st,
        rho: m.k * m.t * disc * n(d2),
        theta: -m.s * pdf(d1) * m.sigma / (2.0 * st) - m.r * m.k * disc * n(d2),
        gamma: pdf(d1) / (m.s * m.sigma * st),
        vanna: -pdf(d1) * d2 / m.sigma,
    }
}
