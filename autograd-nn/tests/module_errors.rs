//! Modules answer bad input with an `Err` naming the op, the shapes and the
//! caller's line (`try_forward`), or panic there (`forward`); constructors
//! check their arguments (hardening issue, point 4 and 5).

use autograd_core::{DType, RefBackend};
use autograd_cpu::Cpu;
use autograd_nn::EmbeddingConfig;
use autograd_nn::LinearConfig;
use autograd_nn::MlpConfig;
use autograd_nn::{BatchNorm1dConfig, LayerNormConfig, MultiheadAttentionConfig, TransformerEncoderConfig, TransformerEncoderLayerConfig};
use autograd_nn::{Dropout, Embedding, Linear, Module, ReLU, Sequential};
use autograd_tensor::Tensor;

#[test]
fn sequential_shape_mismatch_points_at_the_caller() {
    let m = Sequential::<Cpu>::new().add(Linear::new(4, 8)).add(ReLU).add(Linear::new(5, 2));
    let x = Tensor::<Cpu>::zeros([3, 4]);
    let line = line!() + 1;
    let e = m.try_forward(&x).unwrap_err().to_string();
    assert!(e.contains("[3, 8]") && e.contains("[2, 5]"), "{e}");
    assert!(e.contains(&format!("{}:{line}", file!())), "the error should point at this line: {e}");
    assert!(!e.contains("layers.rs"), "{e}");
    // forward panics at the caller's line with the same message
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.forward(&x)));
    let msg = r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("[2, 5]") && msg.contains(file!()), "{msg}");
}

#[test]
fn embedding_index_out_of_range_is_an_err() {
    let e = Embedding::<RefBackend>::new(5, 3);
    let err = e.try_forward(&Tensor::from_vec(vec![1i64, 7], [2])).unwrap_err().to_string();
    assert!(err.starts_with("embedding:") && err.contains("index 7") && err.contains('5') && err.contains(file!()), "{err}");
    assert!(e.try_forward(&Tensor::from_vec(vec![-1i64], [1])).is_err());
    assert_eq!(e.try_forward(&Tensor::from_vec(vec![4i64, 0], [2])).unwrap().dims(), &[2, 3]);
}

#[test]
fn constructors_check_their_arguments() {
    assert!(Dropout::try_new(1.5).is_err());
    assert!(Dropout::try_new(-0.1).is_err());
    assert!(std::panic::catch_unwind(|| Dropout::new(1.5)).is_err());
    assert!(MlpConfig::new(&[4]).try_init::<RefBackend>().is_err());
    assert!(MlpConfig::new(&[]).try_init::<RefBackend>().is_err());
    assert!(std::panic::catch_unwind(|| MlpConfig::new(&[4]).init::<RefBackend>()).is_err());
    assert!(LinearConfig::new(1 << 40, 1 << 40).try_init::<RefBackend>().is_err());
    assert!(EmbeddingConfig::new(1 << 40, 1 << 40).try_init::<RefBackend>().is_err());
    // Linear(0, 3): PyTorch's bias is zeros (bound 0), not NaN
    let l = LinearConfig::new(0, 3).with_dtype(DType::F64).init::<RefBackend>();
    assert_eq!(l.bias.as_ref().unwrap().tensor().to_vec::<f64>(), vec![0.0; 3]);
    let y = l.forward(&Tensor::zeros_dtype([2, 0], DType::F64));
    assert_eq!(y.to_vec::<f64>(), vec![0.0; 6]);
    // Sequential::default() trains like Sequential::new()
    assert!(Sequential::<RefBackend>::default().is_training());
}

/// Every config refuses, at `try_init`, numbers its forward cannot use,
/// naming the config and the field (PyTorch: "embed_dim and num_heads must
/// be greater than 0" at construction; before, `new(0, 1)` was accepted and
/// the forward failed with "the packed projection did not split in three").
#[test]
fn configs_name_the_field_they_refuse() {
    let err = |r: Result<(), autograd_core::Error>| r.unwrap_err().to_string();
    let mha = |e, h| MultiheadAttentionConfig::new(e, h).try_init::<RefBackend>().map(drop);
    let enc = |c: TransformerEncoderLayerConfig| c.try_init::<RefBackend>().map(drop);
    for (e, want) in [
        (err(mha(0, 1)), "embed_dim must be greater than 0"),
        (err(mha(4, 0)), "num_heads must be greater than 0"),
        (err(mha(6, 4)), "embed_dim (6) must be divisible by num_heads (4)"),
        (
            err(MultiheadAttentionConfig::new(4, 2).with_dropout(1.5).try_init::<RefBackend>().map(drop)),
            "dropout has to be between 0 and 1",
        ),
        (err(enc(TransformerEncoderLayerConfig::new(0, 1))), "d_model must be greater than 0"),
        (err(enc(TransformerEncoderLayerConfig::new(4, 0))), "nhead must be greater than 0"),
        (err(enc(TransformerEncoderLayerConfig::new(4, 3))), "d_model (4) must be divisible by nhead (3)"),
        (err(enc(TransformerEncoderLayerConfig::new(4, 2).with_dropout(f64::NAN))), "dropout has to be between 0 and 1"),
        (err(enc(TransformerEncoderLayerConfig::new(4, 2).with_layer_norm_eps(f64::INFINITY))), "layer_norm_eps must be a finite number"),
        (err(LayerNormConfig::new(&[4]).with_eps(-1e-5).try_init::<RefBackend>().map(drop)), "eps must be a finite number"),
        (err(BatchNorm1dConfig::new(4).with_eps(f64::NAN).try_init::<RefBackend>().map(drop)), "eps must be a finite number"),
        (err(BatchNorm1dConfig::new(4).with_momentum(Some(-0.5)).try_init::<RefBackend>().map(drop)), "momentum has to be between 0 and 1"),
    ] {
        assert!(e.contains(want) && e.contains(file!()), "{e} (wanted {want:?})");
    }
    let e = err(TransformerEncoderConfig::new(TransformerEncoderLayerConfig::new(0, 1), 2).try_init::<RefBackend>().map(drop));
    assert!(e.contains("TransformerEncoderLayerConfig"), "{e}");
    // what PyTorch accepts still builds
    assert!(mha(4, 4).is_ok() && enc(TransformerEncoderLayerConfig::new(4, 1).with_dropout(0.0)).is_ok());
}
