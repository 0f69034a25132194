//! PyTorch's `torch.nn.functional`: losses and layers as functions of
//! tensors, composed from differentiable ops (so every one of them supports
//! gradients of any order).

mod attention;
mod loss;
mod nn;

pub use attention::{SdpaOptions, additive_mask, causal_mask, generate_square_subsequent_mask, scaled_dot_product_attention};
pub use loss::{
    CrossEntropyOptions, Reduction, binary_cross_entropy_with_logits, cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss,
    smooth_l1_loss,
};
pub use nn::{RunningStats, batch_norm, dropout, embedding, layer_norm, linear};
