//! Every exported suite of `autograd-testkit` on the reference backend: its
//! conformance (anchors check it against hand-computed values; the
//! comparisons are self-consistency) and everything built above it.
use autograd_core::RefBackend;
autograd_testkit::backend_conformance!(RefBackend);
autograd_testkit::golden_suite!(RefBackend);
autograd_testkit::autograd_suite!(RefBackend);
autograd_testkit::module_suite!(RefBackend);
autograd_testkit::optim_suite!(RefBackend);
autograd_testkit::checkpoint_suite!(RefBackend);

/// The f32 <-> bf16/f16 conversions every low-precision op runs through:
/// the same bits as the `half` crate's scalar conversions for every class
/// of value (ties to even, NaN kept quiet, infinities, subnormals, the
/// largest finite values that round up to infinity), at every position of
/// the chunked loops (lengths around the chunk size).
#[test]
fn low_precision_conversions_match_half_bit_for_bit() {
    use autograd_core::low_precision::{from_f32, to_f32};
    use autograd_core::{DType, HostStorage};
    use half::{bf16, f16};
    let mut g = autograd_core::rng::Generator::new(21);
    let mut values: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001), // signalling NaN
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),           // smallest subnormal
        f32::from_bits(0x3f80_8000), // a tie: 1 + 2^-8, rounds to even (1)
        f32::from_bits(0x3f81_8000), // a tie that rounds up
        65504.0,
        65520.0, // rounds to f16 infinity
        6.0e-8,  // f16 subnormal
    ];
    values.extend((0..5000).map(|_| f32::from_bits(g.next_u64() as u32)));
    for len in [0usize, 1, 15, 16, 17, 33, values.len()] {
        let v = &values[..len];
        for dtype in [DType::BF16, DType::F16] {
            let got = from_f32(v, dtype);
            let want: Vec<u16> = match dtype {
                DType::BF16 => v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect(),
                _ => v.iter().map(|&x| f16::from_f32(x).to_bits()).collect(),
            };
            let got_bits: Vec<u16> = match &got {
                HostStorage::BF16(b) => b.iter().map(|x| x.to_bits()).collect(),
                HostStorage::F16(b) => b.iter().map(|x| x.to_bits()).collect(),
                other => panic!("{:?}", other.dtype()),
            };
            assert_eq!(got_bits, want, "{dtype:?}, length {len}");
            // widening is exact
            let back = to_f32(&got).unwrap();
            let exact: Vec<u32> = match &got {
                HostStorage::BF16(b) => b.iter().map(|x| x.to_f32().to_bits()).collect(),
                HostStorage::F16(b) => b.iter().map(|x| x.to_f32().to_bits()).collect(),
                _ => unreachable!(),
            };
            assert_eq!(back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), exact, "{dtype:?} widened, length {len}");
        }
    }
}

/// The dtype table's facts agree with each other for every dtype: the Rust
/// type the dispatch binds is the dtype's own, its size is the element's,
/// its safetensors name parses back, and values survive host data, storage
/// and the little-endian bytes of a file unchanged.
#[test]
fn every_dtype_of_the_table_round_trips() {
    use autograd_core::{DType, Element, HostData, HostStorage, with_any, with_dtype};
    assert_eq!(DType::ALL.len(), 6);
    for &d in DType::ALL {
        assert_eq!(with_dtype!(d, |T| <T as Element>::DTYPE), d);
        assert_eq!(with_dtype!(d, |T| std::mem::size_of::<T>()), d.size_in_bytes());
        assert_eq!(DType::from_safetensors_name(d.safetensors_name()), Some(d));
        assert!(d.to_string().starts_with("torch."), "{d}");
        let values = HostData::from_f64(&[0.0, 1.0, -2.0, 3.0], d);
        assert_eq!(values.dtype(), d);
        let bytes = values.to_le_bytes();
        assert_eq!(bytes.len(), 4 * d.size_in_bytes());
        assert_eq!(HostData::from_le_bytes(&bytes, d), Some(values.clone()));
        assert_eq!(HostData::from_le_bytes(&bytes[1..], d).is_some(), d.size_in_bytes() == 1);
        let storage = HostStorage::from(values.clone());
        assert_eq!((storage.dtype(), storage.len()), (d, 4));
        let back: HostData = with_any!(HostStorage: &storage, |v: T| v.to_vec().into());
        assert_eq!(back, values);
        let as_f64 = values.to_f64_vec();
        let expect = if d == DType::Bool { vec![0.0, 1.0, 1.0, 1.0] } else { vec![0.0, 1.0, -2.0, 3.0] };
        assert_eq!(as_f64, expect, "{d}");
    }
    // the reference concatenates and selects int64 in int64 (2^53 + 1 is not an f64)
    use autograd_core::{Backend, Layout, RefBackend, Shape};
    let big = RefBackend::from_host(HostData::from(vec![(1i64 << 53) + 1]));
    let l = Layout::contiguous(Shape::from([1]));
    let cat = RefBackend::cat(&[(&big, &l), (&big, &l)], 0).unwrap();
    assert_eq!(RefBackend::to_host(&cat, &Layout::contiguous(Shape::from([2]))).unwrap(), HostData::from(vec![(1i64 << 53) + 1; 2]));
    let c = RefBackend::from_host(HostData::from(vec![true]));
    let w = RefBackend::where_select(&c, &l, &big, &l, &big, &l).unwrap();
    assert_eq!(RefBackend::to_host(&w, &l).unwrap(), HostData::from(vec![(1i64 << 53) + 1]));
}

/// A value converted from f64 to f16 or bf16 (`HostData::from_f64`, the
/// reference backend's casts, `full`) is rounded as PyTorch's
/// `static_cast<c10::BFloat16>(double)` rounds it, through f32: for every
/// f32 value that is the one correctly rounded result. `half`'s own
/// `from_f64` reads only the f64's high word, so an f32 whose only bits
/// past the tie are its lowest three (they land in the low word) was
/// rounded to even instead of up: a reference cast that disagreed with
/// every fast kernel about one f32 in ten thousand (bf16) or a thousand (f16).
#[test]
fn f64_to_low_precision_rounds_as_pytorch_through_f32() {
    use autograd_core::{Backend, DType, HostData, Layout, RefBackend, Shape};
    use half::{bf16, f16};
    // 1 + 2^-8 + 2^-23: just past bf16's tie, so up to 1 + 2^-7
    let past_bf16_tie = f32::from_bits(0x3f80_8001);
    assert_eq!(HostData::from_f64(&[f64::from(past_bf16_tie)], DType::BF16), HostData::BF16(vec![bf16::from_bits(0x3f81)]));
    // 1 + 2^-11 + 2^-23: just past f16's tie, so up to 1 + 2^-10
    let past_f16_tie = f32::from_bits(0x3f80_1001);
    assert_eq!(HostData::from_f64(&[f64::from(past_f16_tie)], DType::F16), HostData::F16(vec![f16::from_bits(0x3c01)]));
    // an f64 between: rounded to f32 first, as PyTorch does (1 + 2^-8 +
    // 2^-40 is 1 + 2^-8 in f32, a tie, which goes to even)
    let between = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    assert_eq!(HostData::from_f64(&[between], DType::BF16), HostData::BF16(vec![bf16::from_bits(0x3f80)]));
    // every class of f32, through the reference backend's cast
    let mut g = autograd_core::rng::Generator::new(5);
    let values: Vec<f32> = (0..20_000).map(|_| f32::from_bits((g.next_u64() >> 32) as u32)).chain([past_bf16_tie, past_f16_tie]).collect();
    let l = Layout::contiguous(Shape::from([values.len()]));
    let x = RefBackend::from_host(HostData::F32(values.clone()));
    let bits = |d: DType| -> Vec<u16> {
        match RefBackend::to_host(&RefBackend::cast(&x, &l, d).unwrap(), &l).unwrap() {
            HostData::BF16(v) => v.iter().map(|x| x.to_bits()).collect(),
            HostData::F16(v) => v.iter().map(|x| x.to_bits()).collect(),
            other => panic!("{:?}", other.dtype()),
        }
    };
    assert_eq!(bits(DType::BF16), values.iter().map(|&x| bf16::from_f32(x).to_bits()).collect::<Vec<_>>());
    assert_eq!(bits(DType::F16), values.iter().map(|&x| f16::from_f32(x).to_bits()).collect::<Vec<_>>());
}
