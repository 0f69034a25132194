//! Every exported suite of `autograd-testkit` on the CPU backend: one line
//! per suite, as for any backend.
use autograd_cpu::Cpu;
autograd_testkit::backend_conformance!(Cpu);
autograd_testkit::golden_suite!(Cpu);
autograd_testkit::autograd_suite!(Cpu);
autograd_testkit::module_suite!(Cpu);
autograd_testkit::optim_suite!(Cpu);
autograd_testkit::checkpoint_suite!(Cpu);
