//! Elementwise unary and binary kernels and `where`.
//!
//! Each op is dispatched once, outside the loop, to a monomorphised closure,
//! so that contiguous loops vectorise. Work is split across the rayon pool
//! only above [`crate::PAR_MIN_ELEMS`] elements.

use crate::simd::multiversion;
use crate::strided::{coalesce, fill_tiled, needs_tiling, row_offsets};
use crate::{PAR_MIN_ELEMS, PAR_MIN_ELEMS_HEAVY};
use autograd_core::memory::scratch;
use autograd_core::scalar::{FloatElem, binary as bin_scalar, unary as un_scalar};
use autograd_core::{BinaryOp, Layout, UnaryOp};
use rayon::prelude::*;

macro_rules! unary_fn {
    ($op:expr, $T:ty, |$f:ident| $body:expr) => {{
        match $op {
            UnaryOp::Neg => {
                let $f = |x: $T| -x;
                $body
            }
            UnaryOp::Exp => {
                let $f = |x: $T| x.vexp();
                $body
            }
            UnaryOp::Log => {
                let $f = |x: $T| x.ln();
                $body
            }
            UnaryOp::Sqrt => {
                let $f = |x: $T| x.sqrt();
                $body
            }
            UnaryOp::Abs => {
                let $f = |x: $T| x.abs();
                $body
            }
            UnaryOp::Tanh => {
                let $f = |x: $T| x.vtanh();
                $body
            }
            UnaryOp::Sigmoid => {
                let $f = |x: $T| autograd_core::scalar::sigmoid(x);
                $body
            }
            UnaryOp::Relu => {
                // NaN and -0.0 pass through: `x < 0` is false for them (PyTorch's relu)
                let $f = |x: $T| if x < <$T>::zero() { <$T>::zero() } else { x };
                $body
            }
            UnaryOp::Square => {
                let $f = |x: $T| x * x;
                $body
            }
            UnaryOp::Recip => {
                let $f = |x: $T| <$T>::one() / x;
                $body
            }
            // GELU and erf spelled out so that the loop inlines the f32 erf
            // polynomial and vectorises (the generic arm calls per element)
            UnaryOp::Erf => {
                let $f = |x: $T| autograd_core::scalar::erf(x);
                $body
            }
            UnaryOp::Gelu => {
                let $f = |x: $T| autograd_core::scalar::gelu(x);
                $body
            }
            op => {
                let $f = move |x: $T| un_scalar::<$T>(op, x);
                $body
            }
        }
    }};
}

macro_rules! binary_fn {
    ($op:expr, $T:ty, |$f:ident| $body:expr) => {{
        match $op {
            BinaryOp::Add => {
                let $f = |a: $T, b: $T| a + b;
                $body
            }
            BinaryOp::Sub => {
                let $f = |a: $T, b: $T| a - b;
                $body
            }
            BinaryOp::Mul => {
                let $f = |a: $T, b: $T| a * b;
                $body
            }
            BinaryOp::Div => {
                let $f = |a: $T, b: $T| a / b;
                $body
            }
            BinaryOp::ThresholdBackward => {
                let $f = |a: $T, b: $T| if b <= <$T>::zero() { <$T>::zero() } else { a };
                $body
            }
            BinaryOp::GeluBackward => {
                let $f = |a: $T, b: $T| autograd_core::scalar::gelu_backward(a, b);
                $body
            }
            // comparisons as 1/0 in the operands' dtype, branch-free so they vectorise
            BinaryOp::Lt => {
                let $f = |a: $T, b: $T| if a < b { <$T>::one() } else { <$T>::zero() };
                $body
            }
            BinaryOp::Le => {
                let $f = |a: $T, b: $T| if a <= b { <$T>::one() } else { <$T>::zero() };
                $body
            }
            BinaryOp::Gt => {
                let $f = |a: $T, b: $T| if a > b { <$T>::one() } else { <$T>::zero() };
                $body
            }
            BinaryOp::Ge => {
                let $f = |a: $T, b: $T| if a >= b { <$T>::one() } else { <$T>::zero() };
                $body
            }
            op => {
                let $f = move |a: $T, b: $T| bin_scalar::<$T>(op, a, b);
                $body
            }
        }
    }};
}

multiversion! {
    /// `out[i] = f(src[i])` over the common length, compiled for the
    /// CPU's widest vectors ([`crate::simd`]).
    fn map_into<T, F>(src: &[T], out: &mut [T], f: F) where [T: FloatElem, F: Fn(T) -> T] {
        for (y, &x) in out.iter_mut().zip(src) {
            *y = f(x);
        }
    }
}

multiversion! {
    /// `out[i] = f(a[i], b[i])` over the common length, as [`map_into`].
    fn zip_into<T, F>(a: &[T], b: &[T], out: &mut [T], f: F) where [T: FloatElem, F: Fn(T, T) -> T] {
        for ((y, &p), &q) in out.iter_mut().zip(a).zip(b) {
            *y = f(p, q);
        }
    }
}

/// `out[i] = op(src[i])`: the kernel a fused program runs per step.
pub(crate) fn unary_slice<T: FloatElem>(op: UnaryOp, src: &[T], out: &mut [T]) {
    unary_fn!(op, T, |f| map_into(src, out, f))
}

/// `out[i] = op(a[i], b[i])`: the kernel a fused program runs per step.
pub(crate) fn binary_slice<T: FloatElem>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T]) {
    binary_fn!(op, T, |f| zip_into(a, b, out, f))
}

/// Whether `op` costs tens of cycles per element (worth threads sooner).
pub(crate) fn is_heavy(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Powf(_)
            | UnaryOp::Erf
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Silu
            | UnaryOp::Softplus { .. }
    )
}

/// Applies `op` to a strided view, returning contiguous data.
pub(crate) fn unary<T: FloatElem>(op: UnaryOp, v: &[T], l: &Layout) -> Vec<T> {
    // Transcendentals cost tens of cycles per element: worth a second core far sooner.
    let min = if is_heavy(op) { PAR_MIN_ELEMS_HEAVY } else { PAR_MIN_ELEMS };
    unary_fn!(op, T, |f| map1(v, l, f, min))
}

// Outputs come from `scratch`: every path below writes every element.
fn map1<T: FloatElem>(v: &[T], l: &Layout, f: impl Fn(T) -> T + Sync + Send + Copy, par_min: usize) -> Vec<T> {
    let n = l.numel();
    if n == 0 {
        return Vec::new();
    }
    if let Some((s, e)) = l.contiguous_range() {
        let src = &v[s..e];
        let mut out = scratch(n, T::zero());
        if n >= par_min {
            let chunk = par_min / 4;
            out.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(o, x)| map_into(x, o, f));
        } else {
            map_into(src, &mut out, f);
        }
        return out;
    }
    let (dims, [st]) = coalesce(l.dims(), [l.strides()]);
    if needs_tiling(&dims, &[&st]) {
        let mut out = scratch(n, T::zero());
        fill_tiled(&mut out, &dims, &[st], [l.offset()], n >= par_min, |[o]| f(v[o]));
        return out;
    }
    let inner = *dims.last().unwrap();
    let is = *st.last().unwrap();
    let rows = n / inner.max(1);
    let strides = [st.clone()];
    let row = |r: usize, out: &mut [T]| {
        let [o] = row_offsets(r, &dims, &strides, [l.offset()]);
        for (i, y) in out.iter_mut().enumerate() {
            *y = f(v[o + i * is]);
        }
    };
    let mut out = scratch(n, T::zero());
    if n >= par_min && rows > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    } else {
        out.chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    }
    out
}

/// Applies `op` to two strided views of the same (broadcast) shape.
pub(crate) fn binary<T: FloatElem>(op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let min = if matches!(op, BinaryOp::Pow | BinaryOp::GeluBackward) { PAR_MIN_ELEMS_HEAVY } else { PAR_MIN_ELEMS };
    binary_fn!(op, T, |f| map2(a, la, b, lb, f, min))
}

fn map2<T: FloatElem>(a: &[T], la: &Layout, b: &[T], lb: &Layout, f: impl Fn(T, T) -> T + Sync + Send + Copy, par_min: usize) -> Vec<T> {
    let n = la.numel();
    if n == 0 {
        return Vec::new();
    }
    let par = n >= par_min;
    let scalar = |l: &Layout| l.strides().iter().zip(l.dims()).all(|(&s, &d)| s == 0 || d == 1);
    match (la.contiguous_range(), lb.contiguous_range()) {
        (Some((s0, e0)), Some((s1, e1))) => {
            let (x, y) = (&a[s0..e0], &b[s1..e1]);
            let mut out = scratch(n, T::zero());
            if par {
                let chunk = par_min / 4;
                out.par_chunks_mut(chunk).zip(x.par_chunks(chunk).zip(y.par_chunks(chunk))).for_each(|(o, (p, q))| zip_into(p, q, o, f));
            } else {
                zip_into(x, y, &mut out, f);
            }
            return out;
        }
        (Some((s0, e0)), None) if scalar(lb) => {
            let c = b[lb.offset()];
            return map1(&a[s0..e0], &Layout::contiguous(la.shape().clone()), move |p| f(p, c), par_min);
        }
        (None, Some((s1, e1))) if scalar(la) => {
            let c = a[la.offset()];
            return map1(&b[s1..e1], &Layout::contiguous(lb.shape().clone()), move |q| f(c, q), par_min);
        }
        _ => {}
    }
    let (dims, [sa, sb]) = coalesce(la.dims(), [la.strides(), lb.strides()]);
    if needs_tiling(&dims, &[&sa, &sb]) {
        let mut out = scratch(n, T::zero());
        fill_tiled(&mut out, &dims, &[sa, sb], [la.offset(), lb.offset()], par, |[i, j]| f(a[i], b[j]));
        return out;
    }
    let inner = *dims.last().unwrap();
    let (ia, ib) = (*sa.last().unwrap(), *sb.last().unwrap());
    let rows = n / inner.max(1);
    let strides = [sa.clone(), sb.clone()];
    let base = [la.offset(), lb.offset()];
    let row = |r: usize, out: &mut [T]| {
        let [oa, ob] = row_offsets(r, &dims, &strides, base);
        match (ia, ib) {
            (1, 1) => zip_into(&a[oa..oa + inner], &b[ob..ob + inner], out, f),
            (1, 0) => {
                let q = b[ob];
                map_into(&a[oa..oa + inner], out, move |p| f(p, q));
            }
            (0, 1) => {
                let p = a[oa];
                map_into(&b[ob..ob + inner], out, move |q| f(p, q));
            }
            _ => {
                for (i, y) in out.iter_mut().enumerate() {
                    *y = f(a[oa + i * ia], b[ob + i * ib]);
                }
            }
        }
    };
    let mut out = scratch(n, T::zero());
    if par && rows > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    } else {
        out.chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    }
    out
}

/// `cond != 0 ? a : b` over three strided views of one shape.
pub(crate) fn where_select<C: Copy + Send + Sync, T: Copy + Send + Sync + Default + 'static>(
    is_true: impl Fn(C) -> bool + Sync + Send,
    c: &[C],
    lc: &Layout,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
) -> Vec<T> {
    let n = la.numel();
    if n == 0 {
        return Vec::new();
    }
    let (dims, [sc, sa, sb]) = coalesce(la.dims(), [lc.strides(), la.strides(), lb.strides()]);
    let inner = *dims.last().unwrap();
    let strides = [sc.clone(), sa.clone(), sb.clone()];
    let (ic, ia, ib) = (*sc.last().unwrap(), *sa.last().unwrap(), *sb.last().unwrap());
    let base = [lc.offset(), la.offset(), lb.offset()];
    let row = |r: usize, out: &mut [T]| {
        let [oc, oa, ob] = row_offsets(r, &dims, &strides, base);
        let m = out.len();
        // Unit-stride rows (with a broadcast scalar branch: masked_fill,
        // relu's backward) as zipped slices, so the loop vectorises.
        match (ic, ia, ib) {
            (1, 1, 1) => {
                for (((y, &c), &a), &b) in out.iter_mut().zip(&c[oc..oc + m]).zip(&a[oa..oa + m]).zip(&b[ob..ob + m]) {
                    *y = if is_true(c) { a } else { b };
                }
            }
            (1, 0, 1) => {
                let a = a[oa];
                for ((y, &c), &b) in out.iter_mut().zip(&c[oc..oc + m]).zip(&b[ob..ob + m]) {
                    *y = if is_true(c) { a } else { b };
                }
            }
            (1, 1, 0) => {
                let b = b[ob];
                for ((y, &c), &a) in out.iter_mut().zip(&c[oc..oc + m]).zip(&a[oa..oa + m]) {
                    *y = if is_true(c) { a } else { b };
                }
            }
            _ => {
                for (i, y) in out.iter_mut().enumerate() {
                    *y = if is_true(c[oc + i * ic]) { a[oa + i * ia] } else { b[ob + i * ib] };
                }
            }
        }
    };
    // every row is written whole
    let mut out = scratch(n, T::default());
    if n >= PAR_MIN_ELEMS {
        out.par_chunks_mut(inner).enumerate().for_each(|(r, ch)| row(r, ch));
    } else {
        out.chunks_mut(inner).enumerate().for_each(|(r, ch)| row(r, ch));
    }
    out
}

/// The view as a dense row-major slice: borrowed when it is one already,
/// a copy when it is strided, empty when it has no elements (whose offset
/// `Layout::check_storage` lets lie anywhere, past the storage too).
pub(crate) fn dense<'a, T: Copy + Send + Sync + Default + 'static>(v: &'a [T], layout: &Layout) -> std::borrow::Cow<'a, [T]> {
    if layout.numel() == 0 {
        return std::borrow::Cow::Borrowed(&[]);
    }
    if layout.is_contiguous() {
        std::borrow::Cow::Borrowed(&v[layout.offset()..layout.offset() + layout.numel()])
    } else {
        std::borrow::Cow::Owned(copy_strided(v, layout))
    }
}

/// Copies a strided view into contiguous data.
pub(crate) fn copy_strided<T: Copy + Send + Sync + Default + 'static>(v: &[T], l: &Layout) -> Vec<T> {
    let n = l.numel();
    if n == 0 {
        return Vec::new();
    }
    if let Some((s, e)) = l.contiguous_range() {
        // a reused buffer when the cache holds one (no fresh pages)
        let mut out = scratch(n, T::default());
        out.copy_from_slice(&v[s..e]);
        return out;
    }
    let (dims, [st]) = coalesce(l.dims(), [l.strides()]);
    // `scratch` below: the tiles (or the rows) cover every element
    if needs_tiling(&dims, &[&st]) {
        let mut out = scratch(n, T::default());
        fill_tiled(&mut out, &dims, &[st], [l.offset()], n >= PAR_MIN_ELEMS, |[o]| v[o]);
        return out;
    }
    let inner = *dims.last().unwrap();
    let is = *st.last().unwrap();
    let strides = [st.clone()];
    let row = |r: usize, out: &mut [T]| {
        let [o] = row_offsets(r, &dims, &strides, [l.offset()]);
        if is == 1 {
            out.copy_from_slice(&v[o..o + out.len()]);
        } else {
            for (i, y) in out.iter_mut().enumerate() {
                *y = v[o + i * is];
            }
        }
    };
    let mut out = scratch(n, T::default());
    if n >= PAR_MIN_ELEMS {
        out.par_chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    } else {
        out.chunks_mut(inner).enumerate().for_each(|(r, c)| row(r, c));
    }
    out
}

/// Writes `src` (through `ls`) into `dst` at the positions of `ld` (same shape).
pub(crate) fn assign<T: Copy + Send + Sync>(dst: &mut [T], ld: &Layout, src: &[T], ls: &Layout) {
    let n = ld.numel();
    if n == 0 {
        return;
    }
    if let (Some((d0, d1)), Some((s0, s1))) = (ld.contiguous_range(), ls.contiguous_range()) {
        let (d, s) = (&mut dst[d0..d1], &src[s0..s1]);
        if n >= PAR_MIN_ELEMS {
            d.par_chunks_mut(PAR_MIN_ELEMS / 4).zip(s.par_chunks(PAR_MIN_ELEMS / 4)).for_each(|(a, b)| a.copy_from_slice(b));
        } else {
            d.copy_from_slice(s);
        }
        return;
    }
    let (dims, [sd, ss]) = coalesce(ld.dims(), [ld.strides(), ls.strides()]);
    let inner = *dims.last().unwrap();
    let (id, is) = (*sd.last().unwrap(), *ss.last().unwrap());
    let strides = [sd.clone(), ss.clone()];
    for r in 0..n / inner {
        let [od, os] = row_offsets(r, &dims, &strides, [ld.offset(), ls.offset()]);
        if (id, is) == (1, 1) {
            dst[od..od + inner].copy_from_slice(&src[os..os + inner]);
            continue;
        }
        for i in 0..inner {
            dst[od + i * id] = src[os + i * is];
        }
    }
}
