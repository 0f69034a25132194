//! Differentiable ops, one family per file. Each op computes its forward
//! with backend primitives and records a backward written with `Tensor` ops,
//! so that the backward pass is itself differentiable (`create_graph`).

/// The panicking twin of each fallible method: `name(args) -> Ret = try_name, "doc";`
/// makes `pub fn name(&self, args) -> Ret` that panics at the caller's line
/// with the `Err` of `try_name` (one home for every op family's twins).
macro_rules! panicking_twins {
    ($($name:ident($($a:ident: $t:ty),*) -> $ret:ty = $try:ident, $doc:expr;)*) => {
        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                ///
                /// Panics where the `try_` twin returns an `Err` (at the caller's line).
                #[track_caller]
                pub fn $name(&self, $($a: $t),*) -> $ret {
                    autograd_core::ResultExt::or_panic(self.$try($($a),*))
                }
            )*
        }
    };
}

pub(crate) mod binary;
pub(crate) mod cast;
pub(crate) mod compare;
pub(crate) mod index;
pub(crate) mod inplace;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod program;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod subscript;
pub(crate) mod unary;
pub(crate) mod view;
pub(crate) mod window;
