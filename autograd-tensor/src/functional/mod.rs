//! PyTorch's `torch.nn.functional`: losses and layers as functions of
//! tensors, composed from differentiable ops (so every one of them supports
//! gradients of any order).
//!
//! The workspace's rule for what may fail: `try_x` returns a `Result`, `x`
//! panics at the caller's line with the same error.
//!
//! ```
//! use autograd_tensor::{Tensor, functional as F};
//! use autograd_core::RefBackend;
//! let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [1, 2]);
//! let w = Tensor::<RefBackend>::from_vec(vec![3.0f64, 4.0], [1, 2]);
//! assert_eq!(F::linear(&x, &w, None).item(), 11.0);
//! assert!(F::try_linear(&x, &w.t(), None).is_err());
//! ```

mod attention;
mod conv;
mod loss;
mod nn;
mod norm;
mod pad;
mod pool;
mod recurrent;
mod resample;

pub use attention::{
    SdpaOptions, try_additive_mask, try_causal_mask, try_generate_square_subsequent_mask, try_scaled_dot_product_attention,
    try_scaled_dot_product_attention_math,
};
pub use conv::{
    ConvOptions, ConvTransposeOptions, Padding, try_conv, try_conv_transpose, try_conv_transpose1d, try_conv_transpose2d, try_conv1d,
    try_conv2d, try_fold, try_unfold,
};
pub use loss::{
    CrossEntropyOptions, Reduction, try_binary_cross_entropy_with_logits, try_cross_entropy, try_huber_loss, try_l1_loss, try_mse_loss,
    try_nll_loss, try_smooth_l1_loss,
};
pub use nn::{RunningStats, try_batch_norm, try_dropout, try_dropout2d, try_embedding, try_layer_norm, try_linear};
pub use norm::{try_group_norm, try_instance_norm, try_rms_norm};
pub use pad::{PadMode, try_pad};
pub use pool::{
    PoolOptions, try_adaptive_avg_pool1d, try_adaptive_avg_pool2d, try_avg_pool1d, try_avg_pool2d, try_max_pool1d,
    try_max_pool1d_with_indices, try_max_pool2d, try_max_pool2d_with_indices,
};
pub use recurrent::{RecurrentWeights, try_gru_cell, try_gru_layer, try_lstm_cell, try_lstm_layer};
pub use resample::{InterpolateMode, InterpolateSize, try_adaptive_max_pool2d, try_adaptive_max_pool2d_with_indices, try_interpolate};

use crate::Tensor;
use autograd_core::{Backend, DType};

/// Generates, for each `try_x`, its panicking twin `x`: the same call,
/// panicking at the caller's line with `try_x`'s error.
macro_rules! panicking_functions {
    (@ret) => { Tensor<B> };
    (@ret $ret:ty) => { $ret };
    ($($name:ident = $try:ident($($a:ident: $t:ty),*) $(-> $ret:ty)?;)*) => {$(
        #[doc = concat!("[`", stringify!($try), "`], panicking at the caller's line on `Err`.")]
        #[track_caller]
        pub fn $name<B: Backend>($($a: $t),*) -> panicking_functions!(@ret $($ret)?) {
            autograd_core::ResultExt::or_panic($try($($a),*))
        }
    )*};
}

panicking_functions! {
    scaled_dot_product_attention = try_scaled_dot_product_attention(q: &Tensor<B>, k: &Tensor<B>, v: &Tensor<B>, options: SdpaOptions<'_, B>);
    scaled_dot_product_attention_math = try_scaled_dot_product_attention_math(q: &Tensor<B>, k: &Tensor<B>, v: &Tensor<B>, options: SdpaOptions<'_, B>);
    additive_mask = try_additive_mask(mask: &Tensor<B>, dtype: DType, true_attends: bool);
    causal_mask = try_causal_mask(l: usize, s: usize, dtype: DType);
    generate_square_subsequent_mask = try_generate_square_subsequent_mask(sz: usize, dtype: DType);
    mse_loss = try_mse_loss(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction);
    l1_loss = try_l1_loss(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction);
    smooth_l1_loss = try_smooth_l1_loss(input: &Tensor<B>, target: &Tensor<B>, beta: f64, reduction: Reduction);
    huber_loss = try_huber_loss(input: &Tensor<B>, target: &Tensor<B>, delta: f64, reduction: Reduction);
    binary_cross_entropy_with_logits = try_binary_cross_entropy_with_logits(input: &Tensor<B>, target: &Tensor<B>, pos_weight: Option<&Tensor<B>>, reduction: Reduction);
    nll_loss = try_nll_loss(input: &Tensor<B>, target: &Tensor<B>, weight: Option<&Tensor<B>>, ignore_index: Option<i64>, reduction: Reduction);
    cross_entropy = try_cross_entropy(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction, opts: &CrossEntropyOptions<B>);
    linear = try_linear(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>);
    layer_norm = try_layer_norm(x: &Tensor<B>, normalized_shape: &[usize], weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f64);
    batch_norm = try_batch_norm(x: &Tensor<B>, running: Option<RunningStats<'_, B>>, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, training: bool, eps: f64);
    embedding = try_embedding(indices: &Tensor<B>, weight: &Tensor<B>);
    dropout = try_dropout(x: &Tensor<B>, p: f64, training: bool);
    conv = try_conv(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions);
    conv1d = try_conv1d(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions);
    conv2d = try_conv2d(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions);
    conv_transpose = try_conv_transpose(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvTransposeOptions);
    conv_transpose1d = try_conv_transpose1d(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvTransposeOptions);
    conv_transpose2d = try_conv_transpose2d(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvTransposeOptions);
    unfold = try_unfold(x: &Tensor<B>, kernel_size: &[usize], dilation: &[usize], padding: &[usize], stride: &[usize]);
    fold = try_fold(x: &Tensor<B>, output_size: &[usize], kernel_size: &[usize], dilation: &[usize], padding: &[usize], stride: &[usize]);
    group_norm = try_group_norm(x: &Tensor<B>, num_groups: usize, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f64);
    instance_norm = try_instance_norm(x: &Tensor<B>, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f64);
    rms_norm = try_rms_norm(x: &Tensor<B>, normalized_shape: &[usize], weight: Option<&Tensor<B>>, eps: Option<f64>);
    dropout2d = try_dropout2d(x: &Tensor<B>, p: f64, training: bool);
    interpolate = try_interpolate(x: &Tensor<B>, size: &InterpolateSize, mode: InterpolateMode, align_corners: bool);
    adaptive_max_pool2d = try_adaptive_max_pool2d(x: &Tensor<B>, output_size: [usize; 2]);
    pad = try_pad(x: &Tensor<B>, pad: &[usize], mode: PadMode);
    max_pool1d = try_max_pool1d(x: &Tensor<B>, options: &PoolOptions);
    max_pool2d = try_max_pool2d(x: &Tensor<B>, options: &PoolOptions);
    avg_pool1d = try_avg_pool1d(x: &Tensor<B>, options: &PoolOptions);
    avg_pool2d = try_avg_pool2d(x: &Tensor<B>, options: &PoolOptions);
    adaptive_avg_pool1d = try_adaptive_avg_pool1d(x: &Tensor<B>, output_size: usize);
    adaptive_avg_pool2d = try_adaptive_avg_pool2d(x: &Tensor<B>, output_size: [usize; 2]);
    max_pool1d_with_indices = try_max_pool1d_with_indices(x: &Tensor<B>, options: &PoolOptions) -> (Tensor<B>, Tensor<B>);
    max_pool2d_with_indices = try_max_pool2d_with_indices(x: &Tensor<B>, options: &PoolOptions) -> (Tensor<B>, Tensor<B>);
    adaptive_max_pool2d_with_indices = try_adaptive_max_pool2d_with_indices(x: &Tensor<B>, output_size: [usize; 2]) -> (Tensor<B>, Tensor<B>);
    lstm_cell = try_lstm_cell(x: &Tensor<B>, h: &Tensor<B>, c: &Tensor<B>, w_ih: &Tensor<B>, w_hh: &Tensor<B>, b_ih: Option<&Tensor<B>>, b_hh: Option<&Tensor<B>>) -> (Tensor<B>, Tensor<B>);
    gru_cell = try_gru_cell(x: &Tensor<B>, h: &Tensor<B>, w_ih: &Tensor<B>, w_hh: &Tensor<B>, b_ih: Option<&Tensor<B>>, b_hh: Option<&Tensor<B>>);
    gru_layer = try_gru_layer(x: &Tensor<B>, h0: &Tensor<B>, w: &RecurrentWeights<'_, B>, reverse: bool, mask: Option<&Tensor<B>>) -> (Tensor<B>, Tensor<B>);
    lstm_layer = try_lstm_layer(x: &Tensor<B>, h0: &Tensor<B>, c0: &Tensor<B>, w: &RecurrentWeights<'_, B>, reverse: bool, mask: Option<&Tensor<B>>) -> (Tensor<B>, Tensor<B>, Tensor<B>);
}
