//! The packed FMA kernel's f16/bf16 products, bit for bit: each output is
//! its f32 sum accumulated in `k` order with fused multiply-adds from
//! zero (the micro-kernel's order, across its passes over `k`), plus the
//! bias in f32, rounded once to the output's dtype. Both epilogues are
//! covered: the one in the kernel's registers (whole tiles with no bias
//! or Linear's one-row bias) and the one after the sums are stored (edge
//! tiles, a full bias matrix), at every instruction set the CPU has (the
//! AVX2 6 x 16 and the AVX-512 8 x 32 tiles). Ties, overflow, signed
//! zeros and NaN come from integer data and planted special values.
//!
//! And `Backend::matmul_cast` to f32 (the kernels' epilogues storing the
//! rounded sums widened) against the product followed by the cast, at
//! every instruction set, on every kernel the CPU runs.
//!
//! And the same bits whether a product runs on one worker or is split
//! over several (by rows of `A` or by panels of `B`).
//!
//! Its own process: it switches the instruction set with `limit_isa`.

use autograd_core::rng::Generator;
use autograd_core::{Layout, Shape};
use autograd_cpu::matmul::widening::matmul_packed;
use autograd_cpu::simd::{Isa, detected_isa, limit_isa};
use half::{bf16, f16};

/// Held by each test for as long as it caps the instruction set: the cap
/// is the process's, and the harness runs tests on several threads (a
/// comparison across two calls must see one ISA in both).
static ISA_CAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `body(isa, failures)` at each of `levels` this CPU has, the ISA capped
/// to it (under [`ISA_CAP`], whether or not another test panicked holding
/// it), the cap lifted after; then no failure may have been pushed.
fn at_each_isa(levels: &[Isa], mut body: impl FnMut(Isa, &mut Vec<String>)) {
    let _cap = ISA_CAP.lock().unwrap_or_else(|e| e.into_inner());
    let mut failures = vec![];
    if levels.iter().all(|&i| i > detected_isa()) {
        eprintln!("skipped: this CPU has none of {levels:?}");
    }
    for &isa in levels.iter().filter(|&&i| i <= detected_isa()) {
        limit_isa(isa);
        body(isa, &mut failures);
    }
    limit_isa(Isa::Amx);
    assert!(failures.is_empty(), "{} products differ:\n{}", failures.len(), failures.join("\n"));
}

/// `v` rounded to `dtype` (bf16 or f16) as host data.
fn low_host(dtype: autograd_core::DType, v: &[f32]) -> autograd_core::HostData {
    use autograd_core::{DType, HostData};
    match dtype {
        DType::BF16 => HostData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        DType::F16 => HostData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        other => panic!("a low-precision dtype, not {other:?}"),
    }
}

/// What the products are made of.
#[derive(Clone, Copy, Debug)]
enum Data {
    /// small integers: exact inputs, sums that land on rounding ties
    Integers,
    /// normal draws rounded to the dtype
    Normals,
    /// integers with NaN, infinities, signed zeros and the largest finite
    /// values planted
    Specials,
}

fn value(g: &mut Generator, data: Data) -> f32 {
    let int = |g: &mut Generator| g.below(41) as f32 - 20.0;
    match data {
        Data::Integers => int(g),
        Data::Normals => g.normal() as f32,
        Data::Specials => match g.below(20) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => -0.0,
            4 => 3.0e38,
            _ => int(g),
        },
    }
}

/// f32 to and from one of the two dtypes, and the kernel's entry for it.
trait Half: Copy + std::fmt::Debug + Sized {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    fn bits(self) -> u16;
    fn entry(
        a: &[Self],
        la: &Layout,
        b: &[Self],
        lb: &Layout,
        init: Option<(&[Self], &Layout)>,
    ) -> autograd_core::Result<Option<Vec<Self>>>;
}

macro_rules! half {
    ($t:ty) => {
        impl Half for $t {
            fn from_f32(x: f32) -> Self {
                <$t>::from_f32(x)
            }
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            fn bits(self) -> u16 {
                self.to_bits()
            }
            fn entry(
                a: &[Self],
                la: &Layout,
                b: &[Self],
                lb: &Layout,
                init: Option<(&[Self], &Layout)>,
            ) -> autograd_core::Result<Option<Vec<Self>>> {
                matmul_packed(a, la, b, lb, init)
            }
        }
    };
}
half!(bf16);
half!(f16);

/// One product `m x k` by `k x n` (B read transposed when `bt`), with no
/// bias, one row broadcast over the rows, or a full matrix; `Err` with
/// the first differing output.
fn check<T: Half>(g: &mut Generator, (m, k, n): (usize, usize, usize), bt: bool, bias: usize, data: Data) -> Result<(), String> {
    let mut draw = |len: usize| -> Vec<T> { (0..len).map(|_| T::from_f32(value(g, data))).collect() };
    let (a, b) = (draw(m * k), draw(k * n));
    let la = Layout::contiguous(Shape::from([m, k]));
    let lb = if bt { Layout::contiguous(Shape::from([n, k])).transpose(0, 1).unwrap() } else { Layout::contiguous(Shape::from([k, n])) };
    let b_at = |p: usize, j: usize| if bt { b[j * k + p] } else { b[p * n + j] };
    let (c, lc) = match bias {
        0 => (vec![], None),
        1 => (draw(n), Some(Layout::contiguous(Shape::from([n])).broadcast_as(&Shape::from([m, n])).unwrap())),
        _ => (draw(m * n), Some(Layout::contiguous(Shape::from([m, n])))),
    };
    let c_at = |i: usize, j: usize| if bias == 1 { c[j] } else { c[i * n + j] };
    let Some(got) = T::entry(&a, &la, &b, &lb, lc.as_ref().map(|l| (&c[..], l))).map_err(|e| e.to_string())? else {
        return Ok(());
    };
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for p in 0..k {
                s = a[i * k + p].to_f32().mul_add(b_at(p, j).to_f32(), s);
            }
            if bias > 0 {
                s += c_at(i, j).to_f32();
            }
            let (want, got) = (T::from_f32(s), got[i * n + j]);
            let same = if want.to_f32().is_nan() { got.to_f32().is_nan() } else { want.bits() == got.bits() };
            if !same {
                return Err(format!(
                    "({i}, {j}) of {m}x{k}x{n}, B transposed {bt}, bias {bias}, {data:?}: {got:?} vs {want:?} (f32 sum {s})"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn packed_products_are_the_sequential_f32_sums_rounded_once() {
    let mut g = Generator::new(32);
    at_each_isa(&[Isa::Avx2, Isa::Avx512], |isa, failures| {
        // rows around the 6- and 8-row tiles (a last tile of every height
        // from 1 to 7, each computed by its own narrower kernel), columns
        // around the 16- and 32-wide ones, k across the passes (up to 160
        // deep on AVX-512, 320 on AVX2, so 257 and 300 are two passes
        // there and 700 three here; and none)
        for m in [1, 5, 6, 7, 8, 9, 10, 11, 12, 16, 17] {
            for n in [1, 15, 16, 17, 32, 33, 64] {
                for dtype in 0..2 {
                    let k = [0, 1, 7, 128, 129, 256, 257, 300, 700][g.below(9) as usize];
                    let (bt, bias) = (g.below(2) == 1, g.below(3) as usize);
                    let data = [Data::Integers, Data::Normals, Data::Specials][g.below(3) as usize];
                    let result = if dtype == 0 {
                        check::<bf16>(&mut g, (m, k, n), bt, bias, data)
                    } else {
                        check::<f16>(&mut g, (m, k, n), bt, bias, data)
                    };
                    if let Err(e) = result {
                        failures.push(format!("{isa:?} {}: {e}", ["bf16", "f16"][dtype]));
                    }
                }
            }
        }
    });
}

/// Products split over three workers by panels of `B` (fewer rows of `A`
/// than columns of `B`, more than 512 KiB of packed `B`: each worker packs
/// its own panels and runs them against every block of rows; a second
/// block of columns past 512 of them at k = 1000) are the same sequential
/// sums, bit for bit, with B read either way and every bias.
#[test]
fn products_split_by_panels_are_the_sequential_f32_sums_rounded_once() {
    let mut g = Generator::new(34);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    at_each_isa(&[Isa::Avx2, Isa::Avx512], |isa, failures| {
        for (i, &shape) in [(24, 700, 400), (10, 1000, 700), (7, 900, 2000)].iter().enumerate() {
            let (bt, bias) = (i % 2 == 1, i % 3);
            let data = [Data::Integers, Data::Normals, Data::Specials][i];
            let result = pool
                .install(|| check::<bf16>(&mut g, shape, bt, bias, data).and_then(|()| check::<f16>(&mut g, shape, !bt, 2 - bias, data)));
            if let Err(e) = result {
                failures.push(format!("{isa:?}: {e}"));
            }
        }
    });
}

/// Whatever kernel `Cpu::matmul` picks for bf16 and f16 (AMX tiles,
/// AVX512_BF16 dot products, the FMA tiles), on one worker and split over
/// three (by rows of `A`, or by panels of `B` where `A` is the shorter),
/// gives the same bits: a split changes which worker computes a tile,
/// never how.
#[test]
fn low_precision_products_are_the_same_on_one_worker_and_three() {
    use autograd_core::{Backend, DType};
    use autograd_cpu::Cpu;
    let mut g = Generator::new(35);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    at_each_isa(&[Isa::Baseline, Isa::Avx2, Isa::Avx512, Isa::Amx], |isa, failures| {
        for &(m, k, n) in &[(24, 700, 400), (10, 1000, 700), (300, 500, 40), (130, 300, 900)] {
            for dtype in [DType::BF16, DType::F16] {
                let v: Vec<f32> = (0..m * k + k * n).map(|_| value(&mut g, Data::Normals)).collect();
                let (a, b) = (Cpu::from_host(low_host(dtype, &v[..m * k])), Cpu::from_host(low_host(dtype, &v[m * k..])));
                let (la, lb) = (Layout::contiguous(Shape::from([m, k])), Layout::contiguous(Shape::from([n, k])).transpose(0, 1).unwrap());
                let lo = Layout::contiguous(Shape::from([m, n]));
                let run = |pool: &rayon::ThreadPool| {
                    pool.install(|| Cpu::to_host(&Cpu::matmul(&a, &la, &b, &lb).unwrap(), &lo).unwrap().to_f64_vec())
                };
                let (single, split) = (run(&one), run(&three));
                if let Some(i) = single.iter().zip(&split).position(|(x, y)| x.to_bits() != y.to_bits()) {
                    failures
                        .push(format!("{isa:?} {dtype:?} {m}x{k}x{n}: element {i}, {} on one worker, {} on three", single[i], split[i]));
                }
            }
        }
    });
}

/// `Cpu::matmul_cast` to f32 is `Cpu::matmul` then `Cpu::cast`, bit for
/// bit (NaN payloads included), at every instruction set this CPU has:
/// whichever kernel that picks (AMX tiles, AVX512_BF16 dot products, the
/// AVX-512 or AVX2 FMA tiles, the widened f32 GEMM below AVX2) rounds each
/// sum in its epilogue and stores it widened. Whole tiles (the epilogue in
/// registers) and edge tiles (after the stored sums), one and several
/// passes over `k`, `k = 0`, transposed operands and a batch; specials
/// planted (NaN, infinities, overflow, signed zeros).
#[test]
fn matmul_cast_to_f32_is_the_product_then_the_cast_at_every_isa() {
    use autograd_core::{Backend, DType, HostData};
    use autograd_cpu::Cpu;
    let mut g = Generator::new(33);
    at_each_isa(&[Isa::Baseline, Isa::Avx2, Isa::Avx512, Isa::Amx], |isa, failures| {
        for &(batch, m, k, n) in
            &[(1, 1, 1, 1), (1, 6, 7, 16), (1, 8, 300, 32), (1, 17, 129, 33), (1, 40, 0, 40), (3, 33, 700, 65), (1, 128, 64, 100)]
        {
            for dtype in [DType::BF16, DType::F16] {
                let data = [Data::Integers, Data::Normals, Data::Specials][g.below(3) as usize];
                let (ta, tb) = (g.below(2) == 1, g.below(2) == 1);
                let mut draw = |len: usize| -> HostData {
                    let v: Vec<f32> = (0..len).map(|_| value(&mut g, data)).collect();
                    low_host(dtype, &v)
                };
                // an operand `rows x cols` per matrix, read transposed from `cols x rows` storage when `t`
                let operand = |rows: usize, cols: usize, t: bool| -> Layout {
                    if t {
                        Layout::contiguous(Shape::from([batch, cols, rows])).transpose(1, 2).unwrap()
                    } else {
                        Layout::contiguous(Shape::from([batch, rows, cols]))
                    }
                };
                let (la, lb) = (operand(m, k, ta), operand(k, n, tb));
                let (a, b) = (Cpu::from_host(draw(batch * m * k)), Cpu::from_host(draw(batch * k * n)));
                let lo = Layout::contiguous(Shape::from([batch, m, n]));
                let got = Cpu::to_host(&Cpu::matmul_cast(&a, &la, &b, &lb, DType::F32).unwrap(), &lo).unwrap();
                let want = Cpu::to_host(&Cpu::cast(&Cpu::matmul(&a, &la, &b, &lb).unwrap(), &lo, DType::F32).unwrap(), &lo).unwrap();
                let (HostData::F32(got), HostData::F32(want)) = (got, want) else { panic!("f32 outputs") };
                if let Some(i) = got.iter().zip(&want).position(|(x, y)| x.to_bits() != y.to_bits()) {
                    failures.push(format!(
                        "{isa:?} {dtype:?} {batch}x{m}x{k}x{n} (A^T {ta}, B^T {tb}, {data:?}): element {i}, {} vs {}",
                        got[i], want[i]
                    ));
                }
            }
        }
    });
}
