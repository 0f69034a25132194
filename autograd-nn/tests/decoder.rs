//! TransformerDecoderLayer, TransformerDecoder and Transformer against
//! PyTorch: each case of `autograd-testkit/fixtures/decoder/decoder.safetensors`
//! (made by `make_fixtures.py` beside it, PyTorch 2.15) rebuilt with the
//! same configuration, PyTorch's state dict loaded strictly, the output and
//! every gradient compared at float64 1e-10, on every backend.

use autograd_core::{Backend, DType};
use autograd_nn::{Activation, DecoderOptions, EncoderOptions, Transformer, TransformerConfig, TransformerDecoderLayerConfig};

mod fixture_case;
use fixture_case::Case;

const FILE: &str = "decoder/decoder.safetensors";

fn decoder_post_norm_relu<B: Backend>() {
    let c = Case::<B>::load(FILE, "decoder_post_norm_relu");
    let mut m = TransformerDecoderLayerConfig::new(8, 2).with_dim_feedforward(16).with_dropout(0.0).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let (tgt, memory) = (c.input("tgt"), c.input("memory"));
    let (mask, pad) = (c.get("in/tgt_mask"), c.get("in/memory_key_padding_mask"));
    let o = DecoderOptions { tgt_mask: Some(&mask), memory_key_padding_mask: Some(&pad), tgt_is_causal: true, ..Default::default() };
    let out = m.try_forward_with(&tgt, &memory, o).unwrap();
    c.check(&m, &[("out", &out)], &[("tgt", &tgt), ("memory", &memory)]);
}

fn decoder_pre_norm_gelu<B: Backend>() {
    let c = Case::<B>::load(FILE, "decoder_pre_norm_gelu");
    let mut m = TransformerDecoderLayerConfig::new(8, 4)
        .with_dim_feedforward(12)
        .with_dropout(0.0)
        .with_activation(Activation::GELU)
        .with_norm_first(true)
        .with_dtype(DType::F64)
        .init::<B>();
    c.load_into(&mut m);
    let (tgt, memory) = (c.input("tgt"), c.input("memory"));
    let (pad, mask) = (c.get("in/tgt_key_padding_mask"), c.get("in/memory_mask"));
    let o = DecoderOptions { tgt_key_padding_mask: Some(&pad), memory_mask: Some(&mask), ..Default::default() };
    let out = m.try_forward_with(&tgt, &memory, o).unwrap();
    c.check(&m, &[("out", &out)], &[("tgt", &tgt), ("memory", &memory)]);
}

fn transformer_full<B: Backend>() {
    let c = Case::<B>::load(FILE, "transformer_full");
    let mut m = TransformerConfig::new(8, 2)
        .with_layers(2, 2)
        .with_dim_feedforward(16)
        .with_layer(|l| l.with_dropout(0.0).with_dtype(DType::F64))
        .init::<B>();
    c.load_into(&mut m);
    let sq = Transformer::<B>::generate_square_subsequent_mask(5, DType::F64);
    c.close("square_mask", &sq, &c.get("out/square_mask"));
    let (src, tgt, pad) = (c.input("src"), c.input("tgt"), c.get("in/src_key_padding_mask"));
    let enc = EncoderOptions { src_key_padding_mask: Some(&pad), ..Default::default() };
    let dec = DecoderOptions { tgt_mask: Some(&sq), memory_key_padding_mask: Some(&pad), tgt_is_causal: true, ..Default::default() };
    let out = m.try_forward_with(&src, &tgt, enc, dec).unwrap();
    c.check(&m, &[("out", &out)], &[("src", &src), ("tgt", &tgt)]);
}

autograd_testkit::for_backends!(with_traced: decoder_post_norm_relu, decoder_pre_norm_gelu, transformer_full);
