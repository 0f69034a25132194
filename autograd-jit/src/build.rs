//! Building a compiled program from a recording: every value placed
//! (a temporary, an input, a lasting buffer), then the passes.

use crate::buffer::Buf;
use crate::passes;
use crate::program::{Loc, Meta, Program, Report};
use crate::recorder::{Origin, Recording, ValueId};
use autograd_core::{Backend, Layout, Result};
use std::sync::Arc;

impl<B: Backend> Program<B> {
    /// Builds the program from a recording: places every value, then runs
    /// the passes (dead code, constants, fusion, memory plan).
    pub(crate) fn build(
        rec: Recording<B>,
        inputs: &[Arc<Buf<B>>],
        outputs: Vec<(ValueId, Layout)>,
        fresh: &[ValueId],
        eager_peak_bytes: usize,
    ) -> Result<Self> {
        let traced_ops = rec.ops.len();
        let mut meta = Vec::with_capacity(rec.values.len());
        let mut locs = Vec::with_capacity(rec.values.len());
        for (id, v) in rec.values.into_iter().enumerate() {
            meta.push(Meta { dtype: v.dtype, len: v.len });
            locs.push(match v.origin {
                Origin::External(b) => match inputs.iter().position(|i| i.id == b.id) {
                    Some(k) => Loc::Input(k),
                    None => Loc::Persistent(b),
                },
                // Made anew by every replay and returned (an input's gradient).
                Origin::Produced(_) if fresh.contains(&id) => Loc::Slot,
                // Still alive after the step: someone (a parameter's .grad) holds it.
                Origin::Produced(w) => match w.upgrade() {
                    Some(b) => Loc::Persistent(b),
                    None => Loc::Slot,
                },
            });
        }
        let mut p = Program {
            ops: rec.ops,
            meta,
            locs,
            outputs,
            frees: Vec::new(),
            released: Vec::new(),
            parallel: Vec::new(),
            pool: Default::default(),
            persistent_ids: Vec::new(),
            report: Report::default(),
        };
        p.report.traced_ops = traced_ops;
        p.report.eager_peak_bytes = eager_peak_bytes;
        passes::eliminate_dead(&mut p);
        passes::fold_constants(&mut p)?;
        passes::fuse_elementwise(&mut p)?;
        passes::plan_memory(&mut p);
        p.persistent_ids = p.locs.iter().filter_map(|l| if let Loc::Persistent(b) = l { Some(b.id) } else { None }).collect();
        p.persistent_ids.sort_unstable();
        Ok(p)
    }
}
