//! `Traced<B>` is a backend like the others: the conformance suite passes
//! on it over the CPU and the reference backends, and the autograd,
//! optimizer and checkpointing suites run eagerly on `Traced<Cpu>` (nothing
//! traced). The golden and module suites, which exercise the same
//! primitives through more code, are left to the backends themselves: each
//! instantiation costs CI a minute of compiling.
use autograd_cpu::Cpu;
use autograd_jit::Traced;

type TracedCpu = Traced<Cpu>;
autograd_testkit::backend_conformance!(TracedCpu);
autograd_testkit::autograd_suite!(TracedCpu);
autograd_testkit::optim_suite!(TracedCpu);
autograd_testkit::checkpoint_suite!(TracedCpu);

mod over_reference {
    type TracedRef = autograd_jit::Traced<autograd_core::RefBackend>;
    autograd_testkit::backend_conformance!(TracedRef);
}
