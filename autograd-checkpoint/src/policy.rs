//! Which parts of a sequence of layers to checkpoint, and what that costs.
//!
//! Costs are counted in *units*: one unit is the activation at a segment
//! boundary (a layer's output); a layer run normally keeps `layer_cost`
//! units for its backward (for Linear + ReLU, the ReLU output: 1). Time is
//! counted in extra layer forwards.

use autograd_core::{Error, Result};
use std::collections::HashMap;

/// How a sequence of layers is run: consecutive segments, each either run
/// normally (its activations kept) or checkpointed (only its input kept; run
/// again in backward, itself following `inner` if given).
///
/// ```
/// use autograd_checkpoint::Plan;
/// let p = Plan::segments(32, 4); // PyTorch's checkpoint_sequential(.., 4, ..)
/// assert_eq!(p.segments.iter().map(|s| s.len).collect::<Vec<_>>(), vec![8, 8, 8, 8]);
/// assert_eq!(p.recomputed_layers(), 24); // the last segment is not checkpointed
/// assert_eq!(p.peak_units(1.0), 11.0);   // 3 checkpoints + 8 layers
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The segments, in order; their lengths add up to the number of layers.
    pub segments: Vec<Segment>,
}

/// One segment of a [`Plan`].
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Number of layers.
    pub len: usize,
    /// Checkpointed (input kept, recomputed in backward) or run normally.
    pub checkpoint: bool,
    /// For a checkpointed segment: how its recomputation runs (nested
    /// checkpoints); `None` runs it normally.
    pub inner: Option<Plan>,
}

impl Plan {
    /// All `n` layers run normally.
    pub fn plain(n: usize) -> Plan {
        Plan { segments: vec![Segment { len: n, checkpoint: false, inner: None }] }
    }

    /// PyTorch's `checkpoint_sequential` split: `segments - 1` checkpointed
    /// segments of `n / segments` layers, then the rest run normally.
    pub fn segments(n: usize, segments: usize) -> Plan {
        let s = segments.clamp(1, n.max(1));
        let size = n / s;
        let mut out: Vec<Segment> = (0..s - 1).map(|_| Segment { len: size, checkpoint: true, inner: None }).collect();
        out.push(Segment { len: n - size * (s - 1), checkpoint: false, inner: None });
        Plan { segments: out }
    }

    /// A checkpoint every `k` layers: segments of `k`, the last run normally.
    pub fn every(n: usize, k: usize) -> Plan {
        let k = k.max(1);
        let mut out = Vec::new();
        let mut left = n;
        while left > k {
            out.push(Segment { len: k, checkpoint: true, inner: None });
            left -= k;
        }
        out.push(Segment { len: left, checkpoint: false, inner: None });
        Plan { segments: out }
    }

    /// The least recomputation among one-level plans that peak at `peak`
    /// units (layers of one unit): checkpointed segments that shorten by one
    /// layer each (while segment `i` is backpropagated, the `i` boundaries
    /// before it are held, so it may keep `peak - i` units), and a last
    /// segment, run without checkpointing, as long as the peak allows. Its
    /// activations are needed at once by backward, so checkpointing it would
    /// only recompute what was just dropped (PyTorch's `checkpoint_sequential`
    /// never does); making it the longest is what saves recomputation.
    ///
    /// ```
    /// use autograd_checkpoint::Plan;
    /// let p = Plan::tapered(32, 10);
    /// assert_eq!(p.segments.iter().map(|s| s.len).collect::<Vec<_>>(), vec![10, 9, 6, 7]);
    /// assert_eq!((p.peak_units(1.0), p.recomputed_layers()), (10.0, 25));
    /// // a peak that holds every layer: no checkpoint at all
    /// assert_eq!(Plan::tapered(8, 8).recomputed_layers(), 0);
    /// ```
    pub fn tapered(n: usize, peak: usize) -> Plan {
        let peak = peak.max(2);
        if n <= peak {
            return Plan::plain(n);
        }
        // the fewest checkpointed segments s whose capacities (peak, peak-1,
        // ..) plus the last segment's (peak - s) reach n; s < peak always
        // works for n <= peak (peak + 1) / 2, otherwise the longest run goes
        // to the last segment and the rest is split evenly below the caps
        let capacity = |s: usize| (0..=s).map(|i| peak.saturating_sub(i)).sum::<usize>();
        let Some(s) = (1..peak).find(|&s| capacity(s) >= n) else {
            let k = peak / 2;
            return Plan::every(n, k.max(1));
        };
        let last = (peak - s).min(n - s);
        let mut left = n - last;
        let mut out = Vec::with_capacity(s + 1);
        for i in 0..s {
            let len = (peak - i).min(left - (s - 1 - i));
            out.push(Segment { len, checkpoint: true, inner: None });
            left -= len;
        }
        out.push(Segment { len: last, checkpoint: false, inner: None });
        Plan { segments: out }
    }

    /// Number of layers covered.
    pub fn num_layers(&self) -> usize {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// Extra layer forwards one backward costs (recomputation, nested included).
    pub fn recomputed_layers(&self) -> usize {
        self.segments.iter().filter(|s| s.checkpoint).map(|s| s.len + s.inner.as_ref().map_or(0, Plan::recomputed_layers)).sum()
    }

    /// Predicted peak of activation memory in units over forward and
    /// backward: while segment `i` is backpropagated, everything kept by the
    /// segments before it is alive, plus what segment `i` holds itself.
    pub fn peak_units(&self, layer_cost: f64) -> f64 {
        let mut held = 0.0;
        let mut peak = 0.0f64;
        for s in &self.segments {
            let active = match (&s.inner, s.checkpoint) {
                (Some(inner), true) => inner.peak_units(layer_cost),
                _ => s.len as f64 * layer_cost,
            };
            peak = peak.max(held + active);
            held += if s.checkpoint { 1.0 } else { s.len as f64 * layer_cost };
        }
        peak
    }

    /// Nesting depth (0 for a plan without checkpoints inside checkpoints).
    pub fn depth(&self) -> usize {
        self.segments.iter().filter_map(|s| s.inner.as_ref()).map(|p| 1 + p.depth()).max().unwrap_or(0)
    }
}

/// Decides how to split a sequence of layers.
pub trait CheckpointPolicy: Send + Sync {
    /// The plan for `num_layers` layers.
    fn plan(&self, num_layers: usize) -> Result<Plan>;
}

/// A policy chosen at run time (from a command line, say) is a policy too.
///
/// ```
/// use autograd_checkpoint::{CheckpointPolicy, EveryK, NoCheckpoint};
/// let chosen: Box<dyn CheckpointPolicy> = if std::env::args().count() > 99 { Box::new(NoCheckpoint) } else { Box::new(EveryK(2)) };
/// assert_eq!(chosen.plan(4).unwrap(), EveryK(2).plan(4).unwrap());
/// ```
impl CheckpointPolicy for Box<dyn CheckpointPolicy> {
    fn plan(&self, num_layers: usize) -> Result<Plan> {
        (**self).plan(num_layers)
    }
}

/// No checkpointing: every activation is kept. Memory `L` layers' worth, no
/// recomputation.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpoint;

impl CheckpointPolicy for NoCheckpoint {
    fn plan(&self, n: usize) -> Result<Plan> {
        Ok(Plan::plain(n))
    }
}

/// PyTorch's `checkpoint_sequential(.., segments, ..)`: `s` segments, all but
/// the last checkpointed. Memory about `s - 1 + L/s` units, recomputation
/// `L - L/s` layers (about one extra forward).
#[derive(Clone, Copy, Debug)]
pub struct Segments(pub usize);

impl CheckpointPolicy for Segments {
    fn plan(&self, n: usize) -> Result<Plan> {
        if self.0 == 0 {
            return Err(Error::msg("Segments: need at least one segment"));
        }
        Ok(Plan::segments(n, self.0))
    }
}

/// A checkpoint every `k` layers: memory about `L/k + k` units,
/// recomputation `L - k` layers at most.
#[derive(Clone, Copy, Debug)]
pub struct EveryK(pub usize);

impl CheckpointPolicy for EveryK {
    fn plan(&self, n: usize) -> Result<Plan> {
        if self.0 == 0 {
            return Err(Error::msg("EveryK: k must be at least 1"));
        }
        Ok(Plan::every(n, self.0))
    }
}

/// About `2 sqrt(L)` units of memory for less than one extra forward: the
/// peak of a checkpoint every `round(sqrt(L))` layers (which minimises
/// `L/k + k`), reached with the least recomputation by [`Plan::tapered`]:
/// segments that shorten by one layer each, then the longest, run without
/// checkpointing. For 32 layers: peak 10 units, 25 layers recomputed
/// (PyTorch's 6 segments: 12 units, 25 layers; even segments of 6: 10 units,
/// 30 layers).
///
/// ```
/// use autograd_checkpoint::{CheckpointPolicy, Sqrt};
/// let p = Sqrt.plan(32).unwrap();
/// assert_eq!(p.segments.iter().map(|s| s.len).collect::<Vec<_>>(), vec![10, 9, 6, 7]);
/// assert_eq!((p.peak_units(1.0), p.recomputed_layers()), (10.0, 25));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Sqrt;

impl CheckpointPolicy for Sqrt {
    fn plan(&self, n: usize) -> Result<Plan> {
        let k = ((n as f64).sqrt().round() as usize).max(1);
        let peak = Plan::every(n, k).peak_units(1.0) as usize;
        Ok(Plan::tapered(n, peak))
    }
}

/// The least recomputation that fits a memory budget (in units; see the
/// module docs), over all plans with nested checkpoints. This is the
/// dynamic program behind Griewank and Walther's binomial checkpointing
/// (revolve): with a budget of `c` units, `r` levels of recomputation cover
/// about `C(c + r, r)` layers, so memory can go down to `O(log L)` units at
/// `O(L log L)` recomputation. With a large budget it returns the plan
/// without checkpoints.
///
/// ```
/// use autograd_checkpoint::{CheckpointPolicy, MemoryBudget};
/// let roomy = MemoryBudget { units: 40, layer_cost: 1 }.plan(32).unwrap();
/// assert_eq!(roomy.recomputed_layers(), 0);
/// let tight = MemoryBudget { units: 6, layer_cost: 1 }.plan(32).unwrap();
/// assert!(tight.peak_units(1.0) <= 6.0 && tight.depth() >= 1);
/// // Two units still work (one checkpoint per nesting level, 31 levels deep); one does not.
/// assert!(MemoryBudget { units: 2, layer_cost: 1 }.plan(32).unwrap().peak_units(1.0) <= 2.0);
/// assert!(MemoryBudget { units: 1, layer_cost: 1 }.plan(32).is_err());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MemoryBudget {
    /// Peak activation memory allowed, in units (boundary activations).
    pub units: usize,
    /// Units one layer keeps when run normally.
    pub layer_cost: usize,
}

impl MemoryBudget {
    /// A budget in bytes, for layers whose output takes `boundary_bytes`
    /// and which keep `layer_bytes` for backward.
    pub fn bytes(budget: usize, boundary_bytes: usize, layer_bytes: usize) -> Self {
        let b = boundary_bytes.max(1);
        MemoryBudget { units: budget / b, layer_cost: layer_bytes.div_ceil(b) }
    }
}

type Memo = HashMap<(usize, usize), Option<(usize, Plan)>>;

impl MemoryBudget {
    /// Least recomputation for `n` layers within `m` units (None if impossible).
    fn best(&self, n: usize, m: usize, memo: &mut Memo) -> Option<(usize, Plan)> {
        if let Some(r) = memo.get(&(n, m)) {
            return r.clone();
        }
        let c = self.layer_cost.max(1);
        let result = if n * c <= m {
            Some((0, Plan::plain(n)))
        } else if m < 2 || n < 2 {
            None
        } else {
            // First segment of j layers checkpointed (it runs with the whole
            // budget when its turn comes); the rest runs holding its input.
            let mut best: Option<(usize, Plan)> = None;
            for j in 1..n {
                let Some((r1, p1)) = self.best(j, m, memo) else { continue };
                let Some((r2, p2)) = self.best(n - j, m - 1, memo) else { continue };
                let cost = j + r1 + r2;
                if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                    let inner = (p1.recomputed_layers() > 0).then_some(p1);
                    let mut segments = vec![Segment { len: j, checkpoint: true, inner }];
                    segments.extend(p2.segments);
                    best = Some((cost, Plan { segments }));
                }
            }
            best
        };
        memo.insert((n, m), result.clone());
        result
    }
}

impl CheckpointPolicy for MemoryBudget {
    fn plan(&self, n: usize) -> Result<Plan> {
        let mut memo = Memo::new();
        self.best(n, self.units, &mut memo).map(|(_, p)| p).ok_or_else(|| {
            let least = (1..=n * self.layer_cost.max(1)).find(|&m| self.best(n, m, &mut memo).is_some()).unwrap_or(0);
            Error::msg(format!(
                "MemoryBudget: {} layers can't run within {} units of activation memory; the least any plan needs is {least}",
                n, self.units
            ))
        })
    }
}
