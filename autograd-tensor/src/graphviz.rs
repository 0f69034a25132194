//! The graph behind a tensor as Graphviz DOT.

use crate::Tensor;
use crate::node::GradFn;
use autograd_core::Backend;
use std::collections::HashSet;
use std::fmt::Write;

fn fmt_vals<B: Backend>(t: &Tensor<B>) -> String {
    let v = t.to_vec_f64();
    if v.len() == 1 { format!("{:.4}", v[0]) } else { format!("shape {:?}", t.dims()) }
}

/// Renders the graph that produced `t` as DOT: one box per backward node
/// (name and source line), one per leaf (`AccumulateGrad`), edges in the
/// direction data flowed. With `values`, leaves show their value and
/// gradient, and the output its value (scalars as numbers, others by shape).
/// Render with `dot -Tpng graph.dot -o graph.png`.
///
/// ```
/// use autograd_tensor::{Tensor, to_dot};
/// use autograd_core::RefBackend;
/// let a = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = (&a * &a).tanh();
/// let dot = to_dot(&y, false);
/// assert!(dot.contains("TanhBackward0") && dot.contains("MulBackward0") && dot.contains("AccumulateGrad"));
/// ```
pub fn to_dot<B: Backend>(t: &Tensor<B>, values: bool) -> String {
    let mut out = String::from("digraph autograd {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n");
    let Some(root) = t.grad_fn() else {
        let _ = writeln!(out, "  leaf [label=\"leaf {}\"];\n}}", fmt_vals(t));
        return out;
    };
    let label = |f: &GradFn<B>| -> String {
        match f {
            GradFn::AccumulateGrad(v) if values => {
                let g = v.grad().map(|g| fmt_vals(&g)).unwrap_or_else(|| "None".into());
                format!("AccumulateGrad\\nvalue {}\\ngrad {}", fmt_vals(v), g)
            }
            _ => match f.location() {
                Some(l) => format!("{}\\n{}:{}", f.name(), l.file(), l.line()),
                None => f.name().to_string(),
            },
        }
    };
    let _ = writeln!(out, "  out [label=\"output{}\", shape=ellipse];", if values { format!("\\n{}", fmt_vals(t)) } else { String::new() });
    let _ = writeln!(out, "  n{} -> out;", root.id());
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    while let Some(f) = stack.pop() {
        if !seen.insert(f.id()) {
            continue;
        }
        let _ = writeln!(out, "  n{} [label=\"{}\"];", f.id(), label(&f));
        for n in f.next_functions().into_iter().flatten() {
            let _ = writeln!(out, "  n{} -> n{};", n.id(), f.id());
            stack.push(n);
        }
    }
    out.push_str("}\n");
    out
}
