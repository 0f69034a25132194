//! `Traced<B>` is a backend like the others: every suite of
//! `autograd-testkit` passes on it, eagerly (nothing traced), over the CPU
//! backend; the conformance suite over the reference backend too.
use autograd_cpu::Cpu;
use autograd_jit::Traced;

type TracedCpu = Traced<Cpu>;
autograd_testkit::backend_conformance!(TracedCpu);
autograd_testkit::golden_suite!(TracedCpu);
autograd_testkit::autograd_suite!(TracedCpu);
autograd_testkit::module_suite!(TracedCpu);
autograd_testkit::optim_suite!(TracedCpu);
autograd_testkit::checkpoint_suite!(TracedCpu);

mod over_reference {
    type TracedRef = autograd_jit::Traced<autograd_core::RefBackend>;
    autograd_testkit::backend_conformance!(TracedRef);
}
