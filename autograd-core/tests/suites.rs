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
