//! The reference backend runs its own conformance suite (anchors check it
//! against hand-computed values; the comparisons are self-consistency).
use autograd_core::RefBackend;
autograd_core::backend_conformance!(RefBackend);
