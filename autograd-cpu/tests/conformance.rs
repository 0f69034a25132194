//! The CPU backend against the reference backend.
use autograd_cpu::Cpu;
autograd_core::backend_conformance!(Cpu);
