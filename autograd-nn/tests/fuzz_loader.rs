//! Fuzzing the safetensors loader with proptest: mutated copies of a real
//! file (bit flips, overwritten bytes, truncation, rewritten header length)
//! must give `Ok` or `Err`, never a panic. Set `AUTOGRAD_FUZZ_CASES` to run
//! longer than CI does.

use autograd_core::RefBackend;
use autograd_nn::load_safetensors_bytes;
use proptest::prelude::*;

fn good() -> Vec<u8> {
    std::fs::read(autograd_testkit::fixture("interop/mlp_f32.safetensors")).unwrap()
}

fn cases() -> u32 {
    std::env::var("AUTOGRAD_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn mutated_files_never_panic(
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in prop::option::of(any::<usize>()),
        header_len in prop::option::of(any::<u64>()),
    ) {
        let mut b = good();
        let header_end = 8 + u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        for (pos, val) in flips {
            // aim most mutations at the header, where the parsing happens
            let i = if pos % 4 == 0 { pos % b.len() } else { pos % header_end };
            b[i] ^= val;
        }
        if let Some(h) = header_len {
            let n = b.len() as u64 * 2;
            b[..8].copy_from_slice(&(h % n).to_le_bytes());
        }
        if let Some(c) = cut {
            b.truncate(c % (b.len() + 1));
        }
        let r = std::panic::catch_unwind(|| load_safetensors_bytes::<RefBackend>(&b, "fuzz").map(|t| t.tensors.len()));
        prop_assert!(r.is_ok(), "the loader panicked");
    }
}
