//! `Display`/`Debug` in PyTorch's style:
//! `tensor([[1.0000, 2.5000], ...], grad_fn=<MulBackward0>)`.

use crate::Tensor;
use autograd_core::{Backend, DType};
use std::fmt;

/// Above this many elements only the first and last three of each dim are printed.
const SUMMARIZE_ABOVE: usize = 1000;
const EDGE: usize = 3;

enum Style {
    Int,
    Integral,
    Fixed,
    Sci,
}

fn choose_style(vals: &[f64], dtype: DType) -> Style {
    if dtype == DType::I64 {
        return Style::Int;
    }
    let finite: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.iter().all(|v| v.fract() == 0.0) {
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        return if max < 1e8 { Style::Integral } else { Style::Sci };
    }
    let nz: Vec<f64> = finite.iter().map(|v| v.abs()).filter(|&v| v > 0.0).collect();
    let (min, max) = nz.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &v| (a.min(v), b.max(v)));
    if !nz.is_empty() && (max / min > 1000.0 || max > 1e8 || min < 1e-4) { Style::Sci } else { Style::Fixed }
}

fn fmt_one(v: f64, style: &Style) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match style {
        Style::Int => format!("{}", v as i64),
        Style::Integral => format!("{v:.0}."),
        Style::Fixed => format!("{v:.4}"),
        Style::Sci => {
            let s = format!("{v:.4e}");
            // Rust prints 1.0000e0; PyTorch prints 1.0000e+00.
            match s.split_once('e') {
                Some((m, e)) => {
                    let (sign, digits) = if let Some(d) = e.strip_prefix('-') { ('-', d) } else { ('+', e) };
                    format!("{m}e{sign}{digits:0>2}")
                }
                None => s,
            }
        }
    }
}

#[allow(clippy::too_many_arguments)] // a recursive printer; the arguments are its state
fn write_nested(
    out: &mut String,
    vals: &[String],
    dims: &[usize],
    strides: &[usize],
    base: usize,
    depth: usize,
    indent: usize,
    summarize: bool,
) {
    if dims.is_empty() {
        out.push_str(&vals[base]);
        return;
    }
    out.push('[');
    let n = dims[0];
    let idxs: Vec<Option<usize>> = if summarize && n > 2 * EDGE {
        (0..EDGE).map(Some).chain(std::iter::once(None)).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    for (k, i) in idxs.iter().enumerate() {
        if k > 0 {
            out.push(',');
            if dims.len() == 1 {
                out.push(' ');
            } else {
                out.push_str(&"\n".repeat(dims.len() - 1));
                out.push_str(&" ".repeat(indent + depth + 1));
            }
        }
        match i {
            Some(i) => write_nested(out, vals, &dims[1..], &strides[1..], base + i * strides[0], depth + 1, indent, summarize),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}

impl<B: Backend> fmt::Display for Tensor<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = self.to_vec_f64();
        let summarize = vals.len() > SUMMARIZE_ABOVE;
        let style = choose_style(&vals, self.dtype());
        let mut strs: Vec<String> = vals.iter().map(|&v| fmt_one(v, &style)).collect();
        let width = strs.iter().map(|s| s.len()).max().unwrap_or(0);
        for s in strs.iter_mut() {
            *s = format!("{s:>width$}");
        }
        let mut out = String::from("tensor(");
        if self.numel() == 0 {
            out.push_str(&format!("[], size={:?}", self.dims()));
        } else {
            let strides = self.shape().contiguous_strides();
            write_nested(&mut out, &strs, self.dims(), &strides, 0, 0, "tensor(".len(), summarize);
        }
        if !matches!(self.dtype(), DType::F32 | DType::I64) {
            out.push_str(&format!(", dtype={}", self.dtype()));
        }
        if let Some(g) = self.grad_fn() {
            out.push_str(&format!(", grad_fn=<{}>", g.name()));
        } else if self.requires_grad() {
            out.push_str(", requires_grad=True");
        }
        out.push(')');
        f.write_str(&out)
    }
}

impl<B: Backend> fmt::Debug for Tensor<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
