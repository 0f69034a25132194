//! Every exported suite of `autograd-testkit` on the GPU backend, one line
//! per suite as for any backend. Without an adapter each test prints why
//! and passes; `AUTOGRAD_REQUIRE_DEVICE=1` (CI) makes that a failure.
use autograd_wgpu::Wgpu;
autograd_testkit::backend_conformance!(Wgpu);
autograd_testkit::golden_suite!(Wgpu);
autograd_testkit::autograd_suite!(Wgpu);
autograd_testkit::module_suite!(Wgpu);
autograd_testkit::optim_suite!(Wgpu);
autograd_testkit::checkpoint_suite!(Wgpu);
