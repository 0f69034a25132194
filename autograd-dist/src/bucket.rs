//! Which gradients are all-reduced together: PyTorch's bucket assignment
//! (`compute_bucket_assignment_by_size`). Parameters are taken in reverse
//! order (backward produces the last layers' gradients first), one open
//! bucket per dtype, closed once it reaches its byte cap; the first bucket
//! is small so that communication starts early.

use autograd_core::DType;

/// One bucket: parameter indices (into the list given) in the order they
/// were added, their dtype and total elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketPlan {
    pub(crate) params: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) numel: usize,
}

/// Buckets for parameters of `(numel, dtype)`, in launch order.
pub(crate) fn assign(params: &[(usize, DType)], first_cap_bytes: usize, cap_bytes: usize) -> Vec<BucketPlan> {
    let mut done: Vec<BucketPlan> = Vec::new();
    let mut open: Vec<BucketPlan> = Vec::new();
    for (i, &(numel, dtype)) in params.iter().enumerate().rev() {
        let k = match open.iter().position(|b| b.dtype == dtype) {
            Some(k) => k,
            None => {
                open.push(BucketPlan { params: Vec::new(), dtype, numel: 0 });
                open.len() - 1
            }
        };
        let b = &mut open[k];
        b.params.push(i);
        b.numel += numel;
        let cap = if done.is_empty() { first_cap_bytes } else { cap_bytes };
        if b.numel.saturating_mul(dtype.size_in_bytes()) >= cap {
            done.push(open.remove(k));
        }
    }
    done.extend(open.into_iter().filter(|b| !b.params.is_empty()));
    done
}
