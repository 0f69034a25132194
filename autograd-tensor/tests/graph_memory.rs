//! One test per process (this file): global counters of nodes and buffers
//! are only meaningful when nothing else runs alongside.

use autograd_core::{RefBackend, memory};
use autograd_cpu::Cpu;
use autograd_tensor::BackwardOptions;
use autograd_tensor::{Tensor, live_nodes};

#[test]
fn million_op_chain_without_stack_overflow_or_leaks() {
    let (nodes0, bufs0) = (live_nodes(), memory::stats().live_buffers);
    {
        let x = Tensor::<RefBackend>::scalar(1.0f64).requires_grad_(true);
        let c = Tensor::<RefBackend>::scalar(1.0f64);
        let mut y = x.clone();
        for i in 0..1_000_000 {
            y = if i % 2 == 0 { &y * &c } else { &y + &c };
        }
        assert_eq!(live_nodes() - nodes0, 1_000_000);
        assert_eq!(y.item(), 500_001.0);
        y.backward().unwrap();
        assert_eq!(x.grad().unwrap().item(), 1.0);
        // saved tensors were freed by backward, nodes live until `y` goes
        assert_eq!(live_nodes() - nodes0, 1_000_000);
    }
    assert_eq!(live_nodes(), nodes0, "graph nodes leaked");
    assert_eq!(memory::stats().live_buffers, bufs0, "storage buffers leaked");

    // Saved activations are released by backward unless retain_graph.
    let w = Tensor::<Cpu>::randn([256, 256]).requires_grad_(true);
    let x = Tensor::<Cpu>::randn([64, 256]);
    let mut h = x.clone();
    for _ in 0..8 {
        h = h.matmul(&w).tanh();
    }
    let loss = h.sum();
    let before = memory::live_bytes();
    loss.backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() }).unwrap();
    let retained = memory::live_bytes();
    loss.backward().unwrap();
    let freed = memory::live_bytes();
    // 8 tanh outputs of 64x256 f32 (64 KiB each) stop being saved
    assert!(retained - freed >= 7 * 64 * 256 * 4, "before {before} retained {retained} freed {freed}");
    let e = loss.backward().unwrap_err().to_string();
    assert!(e.contains("retain_graph"), "{e}");
}
