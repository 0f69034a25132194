//! # autograd-testkit (dev-only)
//!
//! Every suite the workspace proves a backend with, written once and
//! exported, and one [`for_backends!`] macro that instantiates tests once per
//! backend. A new backend proves itself against everything with one line per
//! suite in its own tests:
//!
//! ```ignore
//! autograd_testkit::backend_conformance!(MyBackend); // primitives vs RefBackend
//! autograd_testkit::golden_suite!(MyBackend);        // PyTorch's float64 answers, f64 and f32
//! autograd_testkit::autograd_suite!(MyBackend);      // hooks, anomaly mode, gradcheck, forward mode...
//! autograd_testkit::module_suite!(MyBackend);        // nn modules, PyTorch weights, state dicts
//! autograd_testkit::optim_suite!(MyBackend);         // optimizer trajectories, schedulers, clipping
//! autograd_testkit::checkpoint_suite!(MyBackend);    // activation checkpointing
//! ```
//!
//! `autograd-core/tests/suites.rs` runs them all on [`autograd_core::RefBackend`]
//! and `autograd-cpu/tests/suites.rs` on `Cpu`. Tests that belong to one
//! crate (its own edge cases) stay there and use [`for_backends!`].

pub mod autograd_features;
pub mod checkpointing;
pub mod child;
pub mod conformance;
pub mod golden;
pub mod modules;
pub mod optim;

use std::path::PathBuf;

/// The path of a shipped fixture (`fixtures/golden/...`, `fixtures/interop/...`).
///
/// ```
/// assert!(autograd_testkit::fixture("interop/mlp_f32.safetensors").exists());
/// ```
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
}

/// Instantiates generic test functions once per backend, as `#[test]`s in
/// one module per backend (`reference`, `cpu`).
///
/// `for_backends!(f, g)` calls `super::f::<B>()` and `super::g::<B>()` for each
/// backend; `for_backends!(suites: golden_suite)` instantiates an exported
/// suite macro per backend. A list in brackets replaces the default
/// backends: `for_backends!([mine: MyBackend] f, g)`.
/// `for_backends!(with_traced: f, g)` adds the recording backend
/// `autograd_jit::Traced<autograd_cpu::Cpu>` (module `traced`; the calling
/// crate dev-depends on `autograd-jit`), so that a crate's own tests also
/// run where every primitive goes through the primitive table.
///
/// ```ignore
/// fn adds<B: autograd_core::Backend>() { /* ... */ }
/// autograd_testkit::for_backends!(adds);
/// ```
#[macro_export]
macro_rules! for_backends {
    (suites: $($suite:ident),* $(,)?) => {
        $crate::for_backends!(@suites [reference: autograd_core::RefBackend, cpu: autograd_cpu::Cpu] ($($suite),*));
    };
    ([$($m:ident: $b:ty),* $(,)?] suites: $($suite:ident),* $(,)?) => {
        $crate::for_backends!(@suites [$($m: $b),*] ($($suite),*));
    };
    ([$($m:ident: $b:ty),* $(,)?] $($f:ident),* $(,)?) => {
        $crate::for_backends!(@fns [$($m: $b),*] ($($f),*));
    };
    (with_traced: $($f:ident),* $(,)?) => {
        $crate::for_backends!(@fns [
            reference: autograd_core::RefBackend,
            cpu: autograd_cpu::Cpu,
            traced: autograd_jit::Traced<autograd_cpu::Cpu>
        ] ($($f),*));
    };
    ($($f:ident),* $(,)?) => {
        $crate::for_backends!(@fns [reference: autograd_core::RefBackend, cpu: autograd_cpu::Cpu] ($($f),*));
    };
    (@fns [$($m:ident: $b:ty),*] $fs:tt) => {
        $( $crate::for_backends!(@fns_in $m, $b, $fs); )*
    };
    (@fns_in $m:ident, $b:ty, ($($f:ident),*)) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $f() {
                    super::$f::<$b>()
                }
            )*
        }
    };
    (@suites [$($m:ident: $b:ty),*] $ss:tt) => {
        $( $crate::for_backends!(@suites_in $m, $b, $ss); )*
    };
    (@suites_in $m:ident, $b:ty, ($($s:ident),*)) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            $( $crate::$s!($b); )*
        }
    };
}

/// A module `$m` of `#[test]`s that call `$crate::$m::$f::<$backend>()` for
/// each listed `$f`: the body of every exported suite macro.
#[doc(hidden)]
#[macro_export]
macro_rules! instantiate {
    ($backend:ty, $m:ident, [$($f:ident),* $(,)?]) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $f() {
                    if $crate::backend_available::<$backend>() {
                        $crate::$m::$f::<$backend>()
                    }
                }
            )*
        }
    };
}

/// Whether the suites can run on `B` here ([`autograd_core::Backend::available`]): when
/// not, prints why and the test passes without running, unless the
/// environment sets `AUTOGRAD_REQUIRE_DEVICE=1` (CI, where the device must
/// be there), which turns the skip into a failure.
///
/// ```
/// assert!(autograd_testkit::backend_available::<autograd_core::RefBackend>());
/// ```
pub fn backend_available<B: autograd_core::Backend>() -> bool {
    match B::available() {
        Ok(()) => true,
        Err(e) if std::env::var_os("AUTOGRAD_REQUIRE_DEVICE").is_some_and(|v| v != "0") => {
            panic!("{}: not available and AUTOGRAD_REQUIRE_DEVICE is set: {e}", B::NAME)
        }
        Err(e) => {
            eprintln!("skipped on {}: {e}", B::NAME);
            false
        }
    }
}
