//! Fused attention as a primitive: what a call computes besides its
//! tensors ([`AttentionSpec`]), the checks every backend runs
//! ([`check_forward`], [`check_backward`]), and the composite that is the
//! default of [`Backend::attention`] and [`Backend::attention_backward`]
//! (PyTorch's math path, written from the other primitives).
//!
//! The forward returns the output and, per query, the log-sum-exp of its
//! scaled, masked scores instead of the attention matrix: that is all a
//! backward needs to recompute the probabilities (`p = exp(s - lse)`), so
//! a fused backend keeps `O(L)` per batch item where the math path keeps
//! `O(L S)`. A query that attends to no key (every score `-inf`, or no key
//! at all) gets a zero output row, zero gradients and `lse = +inf`, as
//! PyTorch's `_safe_softmax` gives them.
//!
//! ```
//! use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, attention::AttentionSpec};
//! let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
//! let q = RefBackend::from_host(HostData::from(vec![0.0f64, 1.0])); // L = 2, E = 1
//! let kv = RefBackend::from_host(HostData::from(vec![1.0f64, 3.0])); // S = 2, E = Ev = 1
//! let spec = AttentionSpec { scale: 1.0, causal: true, dropout: 0.0 };
//! let (out, lse) = RefBackend::attention(&[(&q, &l(&[2, 1])), (&kv, &l(&[2, 1])), (&kv, &l(&[2, 1]))], spec).unwrap();
//! let out = RefBackend::to_host(&out, &l(&[2, 1])).unwrap().to_f64_vec();
//! // query 0 sees key 0 only; query 1 weighs its keys e^1 : e^3
//! let w = 1.0 / (1.0 + 2f64.exp());
//! assert!((out[0] - 1.0).abs() < 1e-15 && (out[1] - (w * 1.0 + (1.0 - w) * 3.0)).abs() < 1e-12);
//! let lse = RefBackend::to_host(&lse, &l(&[2])).unwrap().to_f64_vec();
//! assert!((lse[1] - (1f64.exp() + 3f64.exp()).ln()).abs() < 1e-12);
//! ```

use crate::{Backend, BinaryOp, DType, Error, HostData, Layout, ReduceOp, Result, Shape, UnaryOp, validate};

/// The non-tensor arguments of a fused attention call.
///
/// ```
/// use autograd_core::attention::AttentionSpec;
/// let s = AttentionSpec { scale: 0.125, causal: false, dropout: 0.0 };
/// assert_eq!(s, AttentionSpec { scale: 0.125, causal: false, dropout: 0.0 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionSpec {
    /// The factor on `q k^T`.
    pub scale: f64,
    /// Query `i` attends to keys `0..=i` only (top-left aligned, as PyTorch's `is_causal`).
    pub causal: bool,
    /// The probability of dropping each attention weight (`0.0`: none).
    /// Above zero the call takes one more input, last: the seed draw (see
    /// [`Dropout`]), and the weights kept are scaled by `1 / (1 - p)`.
    pub dropout: f64,
}

/// Dropout on the attention weights of a fused call, drawn without storing
/// the `L x S` mask: weight `(b, i, j)` (batch item, query, key) is kept
/// when a hash of the call's seed and the weight's index `(b L + i) S + j`,
/// read as a uniform number in `[0, 1)`, is at least `p`. Forward and
/// backward, and every backend, recompute the same mask from the seed.
///
/// The seed is an input of the call, not a field of [`AttentionSpec`]:
/// two `F64` uniform draws (shape `[2]`) from the library's generator, made
/// by a `random` call the tracer records, so a compiled step draws a new
/// mask on every replay as an eager one does.
///
/// ```
/// use autograd_core::attention::Dropout;
/// let d = Dropout::new(0.25, [0.5, 0.125]).unwrap();
/// let kept = (0..10_000u64).filter(|&i| d.keeps(i)).count();
/// assert!((7_300..7_700).contains(&kept)); // about 1 - p of them
/// assert_eq!(d.scale_at(3), if d.keeps(3) { 1.0 / 0.75 } else { 0.0 });
/// assert!(Dropout::new(1.0, [0.5, 0.5]).is_err()); // p = 1 drops everything: no kernel needed
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of dropping a weight, in `(0, 1)`.
    pub p: f64,
    /// The hash's seed, from the draw.
    pub seed: u64,
}

impl Dropout {
    /// From `p` in `(0, 1)` and the two uniform draws in `[0, 1)` of the call's seed input.
    pub fn new(p: f64, draw: [f64; 2]) -> Result<Self> {
        if !(p > 0.0 && p < 1.0) {
            return Err(bad("attention", format!("the fused kernel's dropout probability must be in (0, 1), got {p}")));
        }
        if draw.iter().any(|u| !(0.0..1.0).contains(u)) {
            return Err(bad("attention", format!("the dropout seed must be two uniform draws in [0, 1), got {draw:?}")));
        }
        let bits = |u: f64| (u * (1u64 << 53) as f64) as u64;
        Ok(Dropout { p, seed: (bits(draw[0]) << 11) ^ bits(draw[1]) })
    }

    /// The index of weight `(b, i, j)` of a call with `l` queries and `s` keys.
    pub fn index(b: usize, i: usize, j: usize, l: usize, s: usize) -> u64 {
        ((b as u64).wrapping_mul(l as u64).wrapping_add(i as u64)).wrapping_mul(s as u64).wrapping_add(j as u64)
    }

    /// Whether the weight of index `index` is kept.
    pub fn keeps(&self, index: u64) -> bool {
        // splitmix64's finaliser over the seed stepped `index` times
        let mut z = self.seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64) >= self.p
    }

    /// What the weight of index `index` is multiplied by: `1 / (1 - p)` if kept, else 0.
    pub fn scale_at(&self, index: u64) -> f64 {
        if self.keeps(index) { 1.0 / (1.0 - self.p) } else { 0.0 }
    }
}

/// A call's inputs without the dropout seed, and its [`Dropout`] when
/// `spec.dropout` is above zero (the seed then the last input: `F64`, shape
/// `[2]`, read through `B::to_host`). `op` names the call in errors.
///
/// ```
/// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, attention::{AttentionSpec, split_dropout}};
/// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
/// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0]));
/// let seed = RefBackend::from_host(HostData::from(vec![0.25f64, 0.5]));
/// let (lx, ls) = (l(&[2, 1]), l(&[2]));
/// let ins = [(&x, &lx), (&x, &lx), (&x, &lx), (&seed, &ls)];
/// let spec = AttentionSpec { scale: 1.0, causal: false, dropout: 0.5 };
/// let (rest, d) = split_dropout::<RefBackend>(&ins, spec, "attention").unwrap();
/// assert_eq!((rest.len(), d.unwrap().p), (3, 0.5));
/// let none = AttentionSpec { dropout: 0.0, ..spec };
/// assert_eq!(split_dropout::<RefBackend>(&ins[..3], none, "attention").unwrap().0.len(), 3);
/// ```
#[allow(clippy::type_complexity)]
pub fn split_dropout<'a, 'b, B: Backend>(
    inputs: &'b [(&'a B::Storage, &'a Layout)],
    spec: AttentionSpec,
    op: &'static str,
) -> Result<(&'b [(&'a B::Storage, &'a Layout)], Option<Dropout>)> {
    if spec.dropout == 0.0 {
        return Ok((inputs, None));
    }
    match split_seed::<B>(inputs, spec, op)? {
        (rest, Some((seed, ls))) => Ok((rest, Some(read_seed::<B>(seed, ls, spec.dropout, op)?))),
        (rest, None) => Ok((rest, None)),
    }
}

/// A call's inputs without the dropout seed, and the seed (checked to be
/// an `F64` `[2]`, its values not read) when `spec.dropout` is above zero,
/// which must then be below 1. The composite passes the seed to
/// [`Backend::attention_dropout`], so a backend that builds the mask
/// where the seed lies never reads it back.
#[allow(clippy::type_complexity)]
fn split_seed<'a, 'b, B: Backend>(
    inputs: &'b [(&'a B::Storage, &'a Layout)],
    spec: AttentionSpec,
    op: &'static str,
) -> Result<(&'b [(&'a B::Storage, &'a Layout)], Option<(&'a B::Storage, &'a Layout)>)> {
    if spec.dropout == 0.0 {
        return Ok((inputs, None));
    }
    if !(spec.dropout > 0.0 && spec.dropout < 1.0) {
        return Err(bad(op, format!("the fused kernel's dropout probability must be in (0, 1), got {}", spec.dropout)));
    }
    let Some((&(seed, ls), rest)) = inputs.split_last() else {
        return Err(bad(op, "a call with dropout takes its seed as the last input; got no inputs".into()));
    };
    check_seed::<B>(seed, ls, op)?;
    Ok((rest, Some((seed, ls))))
}

/// `Err` naming `op` unless the seed is an `F64` `[2]` inside its storage.
fn check_seed<B: Backend>(seed: &B::Storage, ls: &Layout, op: &'static str) -> Result<()> {
    if B::dtype(seed) != DType::F64 || ls.dims() != [2] {
        return Err(bad(
            op,
            format!("the dropout seed must be an F64 tensor of shape [2], got {:?} of shape {:?}", B::dtype(seed), ls.dims()),
        ));
    }
    validate::input(op, B::len(seed), ls)
}

/// The [`Dropout`] of probability `p` from a call's seed (`F64`, `[2]`,
/// read back through `B::to_host`); `Err` naming `op` for any other seed.
fn read_seed<B: Backend>(seed: &B::Storage, ls: &Layout, p: f64, op: &'static str) -> Result<Dropout> {
    check_seed::<B>(seed, ls, op)?;
    let v = B::to_host(seed, ls)?.to_f64_vec();
    Dropout::new(p, [v[0], v[1]])
}

/// [`Backend::attention_dropout`]'s default: the scale of every weight of
/// a call with dropout `p` and this `seed`, `shape` `[batch.., L, S]`
/// (0 or `1 / (1 - p)`), built on the host and uploaded to `B` in `dtype`.
/// `Err` for a seed that is not `F64` `[2]` of two draws in `[0, 1)`, `p`
/// outside `(0, 1)`, a shape of rank below 2, or a dtype that is not a float.
///
/// ```
/// use autograd_core::{Backend, DType, HostData, Layout, RefBackend, Shape, attention::{dropout_scales, Dropout}};
/// let seed = RefBackend::from_host(HostData::from(vec![0.25f64, 0.5]));
/// let ls = Layout::contiguous(Shape::from([2]));
/// let s = dropout_scales::<RefBackend>(&seed, &ls, &Shape::from([2, 3]), 0.5, DType::F64).unwrap();
/// let d = Dropout::new(0.5, [0.25, 0.5]).unwrap();
/// let want: Vec<f64> = (0..3).map(|j| d.scale_at(Dropout::index(0, 1, j, 2, 3))).collect();
/// assert_eq!(RefBackend::to_host(&s, &Layout::contiguous(Shape::from([2, 3]))).unwrap().to_f64_vec()[3..], want);
/// assert!(dropout_scales::<RefBackend>(&seed, &ls, &Shape::from([3]), 0.5, DType::F64).is_err()); // no L x S
/// ```
pub fn dropout_scales<B: Backend>(seed: &B::Storage, lseed: &Layout, shape: &Shape, p: f64, dtype: DType) -> Result<B::Storage> {
    const OP: &str = "attention_dropout";
    let r = shape.rank();
    if r < 2 || !dtype.is_float() {
        return Err(bad(OP, format!("expected a float dtype and a shape [batch.., L, S], got {dtype:?} and {:?}", shape.dims())));
    }
    let d = read_seed::<B>(seed, lseed, p, OP)?;
    let (l, s) = (shape.dims()[r - 2], shape.dims()[r - 1]);
    let batch = shape.dims()[..r - 2]
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| bad(OP, format!("the batch of {:?} overflows usize", shape.dims())))?;
    scales::<B>(d, (batch, l, s), shape, dtype, OP)
}

/// The scale of every weight of a call (`[batch.., L, S]`, 0 or
/// `1 / (1 - p)`), uploaded to `B` in `dtype`: the composite's mask.
fn scales<B: Backend>(
    d: Dropout,
    (batch, l, s): (usize, usize, usize),
    shape: &Shape,
    dtype: DType,
    op: &'static str,
) -> Result<B::Storage> {
    let n = shape.try_numel(op)?;
    crate::memory::check_alloc(op, n, 8)?;
    let mut v = Vec::with_capacity(n);
    for b in 0..batch {
        for i in 0..l {
            v.extend((0..s).map(|j| d.scale_at(Dropout::index(b, i, j, l, s))));
        }
    }
    Ok(B::from_host(HostData::from_f64(&v, dtype)))
}

/// The sizes of a fused attention call, from [`check_forward`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionSizes {
    /// The batch dims' element count (batch times heads).
    pub batch: usize,
    /// Queries.
    pub l: usize,
    /// Keys.
    pub s: usize,
    /// The query and key width.
    pub e: usize,
    /// The value width.
    pub ev: usize,
    /// How many batch dims lead the layouts.
    pub batch_dims: usize,
}

fn bad(op: &'static str, msg: String) -> Error {
    Error::invalid_shape(op, msg)
}

/// The forward's inputs: `q [..., L, E]`, `k [..., S, E]`, `v [..., S, Ev]`
/// and optionally a mask `[..., L, S]`, one rank, identical batch dims (a
/// broadcast batch has stride 0), `q`, `k`, `v` of one float dtype, the
/// mask `Bool` (`true` attends) or of that dtype (added to the scores).
/// The outputs can be allocated. `dtypes` are the inputs' dtypes in order.
///
/// ```
/// use autograd_core::{DType, Layout, Shape, attention::check_forward};
/// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
/// let f = [DType::F32; 3];
/// let sizes = check_forward(&[&l(&[2, 5, 4]), &l(&[2, 7, 4]), &l(&[2, 7, 3])], &f).unwrap();
/// assert_eq!((sizes.batch, sizes.l, sizes.s, sizes.e, sizes.ev), (2, 5, 7, 4, 3));
/// assert!(check_forward(&[&l(&[2, 5, 4]), &l(&[2, 7, 3]), &l(&[2, 7, 3])], &f).is_err()); // E differs
/// assert!(check_forward(&[&l(&[2, 5, 4]), &l(&[2, 7, 4]), &l(&[2, 7, 3]), &l(&[2, 7, 5])], &[DType::F32, DType::F32, DType::F32, DType::Bool]).is_err());
/// ```
pub fn check_forward(layouts: &[&Layout], dtypes: &[DType]) -> Result<AttentionSizes> {
    const OP: &str = "attention";
    let ([q, k, v], mask) = match layouts {
        [q, k, v] => ([*q, *k, *v], None),
        [q, k, v, m] => ([*q, *k, *v], Some(*m)),
        _ => return Err(bad(OP, format!("expected query, key, value and an optional mask, got {} tensors", layouts.len()))),
    };
    if dtypes.len() != layouts.len() {
        return Err(bad(OP, format!("{} dtypes for {} tensors", dtypes.len(), layouts.len())));
    }
    let r = q.rank();
    let batch_dims = r.checked_sub(2).ok_or_else(|| bad(OP, format!("the query must be (..., L, E), got {:?}", q.dims())))?;
    let lead = &q.dims()[..batch_dims];
    let same_batch = |t: &Layout| t.rank() == r && &t.dims()[..batch_dims] == lead;
    let (l, e) = (q.dims()[r - 2], q.dims()[r - 1]);
    let fits = same_batch(k)
        && same_batch(v)
        && k.dims()[r - 1] == e
        && v.dims()[r - 2] == k.dims()[r - 2]
        && mask.is_none_or(|m| same_batch(m) && m.dims()[r - 2..] == [l, k.dims()[r - 2]]);
    if !fits {
        let m = mask.map(|m| format!(" and mask {:?}", m.dims())).unwrap_or_default();
        return Err(bad(
            OP,
            format!(
                "expected query (..., L, E), key (..., S, E), value (..., S, Ev) and mask (..., L, S) with one batch, got {:?}, {:?}, {:?}{m}",
                q.dims(),
                k.dims(),
                v.dims()
            ),
        ));
    }
    let dtype = dtypes[0];
    if !dtype.is_float() || dtypes[1] != dtype || dtypes[2] != dtype {
        return Err(bad(OP, format!("expected query, key and value of one float dtype, got {:?}", &dtypes[..3])));
    }
    if let Some(&md) = dtypes.get(3)
        && md != DType::Bool
        && md != dtype
    {
        return Err(bad(OP, format!("expected a Bool mask or a float mask of the query's dtype {dtype:?}, got {md:?}")));
    }
    let (s, ev) = (k.dims()[r - 2], v.dims()[r - 1]);
    let batch = Shape::new(lead.to_vec()).try_numel(OP)?;
    let out: Vec<usize> = lead.iter().copied().chain([l, ev]).collect();
    validate::output(OP, &Shape::new(out), dtype)?;
    validate::output(OP, &Shape::new(lead.iter().copied().chain([l]).collect::<Vec<_>>()), dtype)?;
    Ok(AttentionSizes { batch, l, s, e, ev, batch_dims })
}

/// The backward's inputs: `q`, `k`, `v`, the forward's `out [..., L, Ev]`
/// and `lse [..., L]`, the output's gradient `[..., L, Ev]`, then the
/// forward's mask if it had one; the forward's checks hold, and the three
/// gradients can be allocated.
///
/// ```
/// use autograd_core::{DType, Layout, Shape, attention::check_backward};
/// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
/// let (q, kv, out, lse) = (l(&[3, 2]), l(&[4, 2]), l(&[3, 2]), l(&[3]));
/// assert!(check_backward(&[&q, &kv, &kv, &out, &lse, &out], &[DType::F64; 6]).is_ok());
/// assert!(check_backward(&[&q, &kv, &kv, &out, &out, &out], &[DType::F64; 6]).is_err()); // lse is (..., L)
/// ```
pub fn check_backward(layouts: &[&Layout], dtypes: &[DType]) -> Result<AttentionSizes> {
    const OP: &str = "attention_backward";
    if layouts.len() != 6 && layouts.len() != 7 || dtypes.len() != layouts.len() {
        return Err(bad(OP, format!("expected q, k, v, out, lse, grad_out and an optional mask, got {} tensors", layouts.len())));
    }
    let fwd: Vec<&Layout> = layouts[..3].iter().chain(layouts.get(6)).copied().collect();
    let fwd_dtypes: Vec<DType> = dtypes[..3].iter().chain(dtypes.get(6)).copied().collect();
    let sizes = check_forward(&fwd, &fwd_dtypes)?;
    let lead = &layouts[0].dims()[..sizes.batch_dims];
    let out: Vec<usize> = lead.iter().copied().chain([sizes.l, sizes.ev]).collect();
    let lse: Vec<usize> = lead.iter().copied().chain([sizes.l]).collect();
    let (lo, ll, lg) = (layouts[3], layouts[4], layouts[5]);
    if lo.dims() != out.as_slice() || lg.dims() != out.as_slice() || ll.dims() != lse.as_slice() {
        return Err(bad(
            OP,
            format!("expected out and grad_out {out:?} and lse {lse:?}, got {:?}, {:?} and {:?}", lo.dims(), lg.dims(), ll.dims()),
        ));
    }
    if dtypes[3..6].iter().any(|&d| d != dtypes[0]) {
        return Err(bad(OP, format!("expected out, lse and grad_out of the query's dtype, got {:?}", &dtypes[3..6])));
    }
    for t in &layouts[..3] {
        validate::output(OP, t.shape(), dtypes[0])?;
    }
    Ok(sizes)
}

/// The additive causal mask `[l, s]` (`0` where key `j <= i`, `-inf`
/// above), uploaded to `B` in `dtype`.
fn causal_mask<B: Backend>(l: usize, s: usize, dtype: DType) -> Result<B::Storage> {
    crate::memory::check_alloc("attention", l.saturating_mul(s), 8)?;
    let v: Vec<f64> = (0..l).flat_map(|i| (0..s).map(move |j| if j <= i { 0.0 } else { f64::NEG_INFINITY })).collect();
    Ok(B::from_host(HostData::from_f64(&v, dtype)))
}

/// A scalar broadcast to `shape`.
fn scalar<B: Backend>(v: f64, dtype: DType, shape: &Shape) -> Result<(B::Storage, Layout)> {
    Ok((B::full(&Shape::scalar(), v, dtype)?, Layout::contiguous(Shape::scalar()).broadcast_as(shape)?))
}

/// The scaled, masked scores `[..., L, S]` and the scaled query, both contiguous.
fn scores<B: Backend>(inputs: &[(&B::Storage, &Layout)], mask: Option<(&B::Storage, &Layout)>, spec: AttentionSpec) -> Result<Scores<B>> {
    let [(q, lq), (k, lk), ..] = inputs else { unreachable!("checked: three inputs or more") };
    let r = lq.rank();
    let dtype = B::dtype(q);
    let (scale, ls) = scalar::<B>(spec.scale, dtype, lq.shape())?;
    let qs = B::binary(BinaryOp::Mul, q, lq, &scale, &ls)?;
    let lqs = Layout::contiguous(lq.shape().clone());
    let mut s = B::matmul(&qs, &lqs, k, &lk.transpose(r - 2, r - 1)?)?;
    let mut dims = lq.dims().to_vec();
    dims[r - 1] = lk.dims()[r - 2];
    let shape = Shape::new(dims);
    let out = Layout::contiguous(shape.clone());
    if let Some((m, lm)) = mask {
        s = if B::dtype(m) == DType::Bool {
            let (ninf, ln) = scalar::<B>(f64::NEG_INFINITY, dtype, &shape)?;
            B::where_select(m, lm, &s, &out, &ninf, &ln)?
        } else {
            B::binary(BinaryOp::Add, &s, &out, m, lm)?
        };
    } else if spec.causal {
        let (l, n) = (shape.dims()[r - 2], shape.dims()[r - 1]);
        let c = causal_mask::<B>(l, n, dtype)?;
        s = B::binary(BinaryOp::Add, &s, &out, &c, &Layout::contiguous(Shape::from([l, n])).broadcast_as(&shape)?)?;
    }
    Ok(Scores { s, layout: out, qs, lqs })
}

struct Scores<B: Backend> {
    s: B::Storage,
    layout: Layout,
    qs: B::Storage,
    lqs: Layout,
}

/// The mask among a call's inputs (the fourth of the forward's, the
/// seventh of the backward's).
fn mask_at<'a, S>(inputs: &[(&'a S, &'a Layout)], k: usize) -> Option<(&'a S, &'a Layout)> {
    inputs.get(k).copied()
}

/// [`Backend::attention`] from products, a masked max, exponentials and sums.
pub fn forward<B: Backend>(inputs: &[(&B::Storage, &Layout)], spec: AttentionSpec) -> Result<(B::Storage, B::Storage)> {
    let (inputs, seed) = split_seed::<B>(inputs, spec, "attention")?;
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l)| *l).collect();
    let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| B::dtype(s)).collect();
    let z = check_forward(&layouts, &dtypes)?;
    let (q, v, lv) = (inputs[0].0, inputs[2].0, inputs[2].1);
    let dtype = B::dtype(q);
    let lead = &layouts[0].dims()[..z.batch_dims];
    let keep = |last: &[usize]| Shape::new(lead.iter().chain(last).copied().collect::<Vec<_>>());
    let (lse_shape, out_shape) = (keep(&[z.l]), keep(&[z.l, z.ev]));
    if z.s == 0 {
        return Ok((B::full(&out_shape, 0.0, dtype)?, B::full(&lse_shape, f64::INFINITY, dtype)?));
    }
    let sc = scores::<B>(inputs, mask_at(inputs, 3), spec)?;
    let r = sc.layout.rank();
    let rows = keep(&[z.l, 1]);
    let (lrow, lrow_b) = (Layout::contiguous(rows.clone()), Layout::contiguous(rows.clone()).broadcast_as(sc.layout.shape())?);
    let max = B::reduce(ReduceOp::Max, &sc.s, &sc.layout, &[r - 1])?;
    // a row with every score -inf is shifted by 0, not by -inf (NaN)
    let (ninf, ln) = scalar::<B>(f64::NEG_INFINITY, dtype, &rows)?;
    let (zero, lz) = scalar::<B>(0.0, dtype, &rows)?;
    let masked = B::binary(BinaryOp::Eq, &max, &lrow, &ninf, &ln)?;
    let shift = B::where_select(&masked, &lrow, &zero, &lz, &max, &lrow)?;
    let e = B::unary(UnaryOp::Exp, &B::binary(BinaryOp::Sub, &sc.s, &sc.layout, &shift, &lrow_b)?, &sc.layout)?;
    let sum = B::reduce(ReduceOp::Sum, &e, &sc.layout, &[r - 1])?;
    let lse = B::binary(BinaryOp::Add, &shift, &lrow, &B::unary(UnaryOp::Log, &sum, &lrow)?, &lrow)?;
    // no key attended: lse = +inf, so that exp(s - lse) = 0 in the backward
    let empty = B::binary(BinaryOp::Eq, &sum, &lrow, &zero, &lz)?;
    let (inf, li) = scalar::<B>(f64::INFINITY, dtype, &rows)?;
    let lse = B::where_select(&empty, &lrow, &inf, &li, &lse, &lrow)?;
    let p = probabilities::<B>(&sc, &lse, &lrow_b)?;
    // dropout after the softmax: lse stays that of the weights before it
    let p = match seed {
        Some((seed, ls)) => {
            let keep = B::attention_dropout(seed, ls, sc.layout.shape(), spec.dropout, dtype)?;
            B::binary(BinaryOp::Mul, &p, &sc.layout, &keep, &sc.layout)?
        }
        None => p,
    };
    let out = B::matmul(&p, &sc.layout, v, lv)?;
    Ok((out, lse))
}

/// `exp(s - lse)`: the attention weights, zero in a row that attends to no key.
fn probabilities<B: Backend>(sc: &Scores<B>, lse: &B::Storage, lrow_b: &Layout) -> Result<B::Storage> {
    B::unary(UnaryOp::Exp, &B::binary(BinaryOp::Sub, &sc.s, &sc.layout, lse, lrow_b)?, &sc.layout)
}

/// [`Backend::attention_backward`] from the forward's scores recomputed:
/// `dv = p^T dO`, `ds = p (dO v^T - rowsum(dO out))`, `dq = scale ds k`,
/// `dk = ds^T (scale q)`.
pub fn backward<B: Backend>(inputs: &[(&B::Storage, &Layout)], spec: AttentionSpec) -> Result<Vec<B::Storage>> {
    let (inputs, seed) = split_seed::<B>(inputs, spec, "attention_backward")?;
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l)| *l).collect();
    let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| B::dtype(s)).collect();
    let z = check_backward(&layouts, &dtypes)?;
    let [(q, lq), (k, lk), (v, lv), (o, lo), (lse, llse), (g, lg), ..] = inputs else { unreachable!("checked: six inputs or more") };
    let dtype = B::dtype(q);
    if z.s == 0 || z.l == 0 || z.batch == 0 {
        let zeros = |l: &Layout| B::full(l.shape(), 0.0, dtype);
        return Ok(vec![zeros(lq)?, zeros(lk)?, zeros(lv)?]);
    }
    let sc = scores::<B>(inputs, mask_at(inputs, 6), spec)?;
    let r = sc.layout.rank();
    let rows: Vec<usize> = lq.dims()[..r - 1].iter().copied().chain([1]).collect();
    let lrow = Layout::new(Shape::new(rows.clone()), llse.strides().iter().copied().chain([0]).collect::<Vec<_>>(), llse.offset());
    let lrow_b = lrow.broadcast_as(sc.layout.shape())?;
    let p = probabilities::<B>(&sc, lse, &lrow_b)?;
    let t = |l: &Layout| l.transpose(r - 2, r - 1);
    // with dropout, out = (p m) v for the scales m: dv = (p m)^T dO and
    // the weights' gradient is m (dO v^T); D = rowsum(dO out) holds as is
    let keep = seed.map(|(seed, ls)| B::attention_dropout(seed, ls, sc.layout.shape(), spec.dropout, dtype)).transpose()?;
    let times_keep = |x: &B::Storage| keep.as_ref().map(|m| B::binary(BinaryOp::Mul, x, &sc.layout, m, &sc.layout)).transpose();
    let dv = match times_keep(&p)? {
        Some(pm) => B::matmul(&pm, &t(&sc.layout)?, g, lg)?,
        None => B::matmul(&p, &t(&sc.layout)?, g, lg)?,
    };
    let dp = B::matmul(g, lg, v, &t(lv)?)?;
    let dp = times_keep(&dp)?.unwrap_or(dp);
    let go = Layout::contiguous(lo.shape().clone());
    let d = B::reduce(ReduceOp::Sum, &B::binary(BinaryOp::Mul, g, lg, o, lo)?, &go, &[r - 1])?;
    let ld = Layout::contiguous(Shape::new(rows)).broadcast_as(sc.layout.shape())?;
    let ds = B::binary(BinaryOp::Mul, &p, &sc.layout, &B::binary(BinaryOp::Sub, &dp, &sc.layout, &d, &ld)?, &sc.layout)?;
    let dq = B::matmul(&ds, &sc.layout, k, lk)?;
    let (scale, ls) = scalar::<B>(spec.scale, dtype, lq.shape())?;
    let dq = B::binary(BinaryOp::Mul, &dq, &Layout::contiguous(lq.shape().clone()), &scale, &ls)?;
    let dk = B::matmul(&ds, &t(&sc.layout)?, &sc.qs, &sc.lqs)?;
    Ok(vec![dq, dk, dv])
}
