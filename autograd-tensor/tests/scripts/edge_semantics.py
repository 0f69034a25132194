"""PyTorch's answers at the edges, written into autograd-tensor/tests/edge_semantics.rs.

Run with PyTorch 2.15 (CPU): python edge_semantics.py. Each line prints a
case name and the values the Rust test asserts.
"""
import math
import torch

torch.set_printoptions(precision=17)
f64 = torch.float64


def show(name, *vals):
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            out.append(repr(v.detach().reshape(-1).tolist()) + f" {v.dtype}")
        else:
            out.append(repr(v))
    print(name, *out)


# bce_with_logits at logit 0, target 1 (and a few more logits)
x = torch.tensor([0.0, -2.0, 3.0, 0.0], dtype=f64, requires_grad=True)
t = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=f64)
l = torch.nn.functional.binary_cross_entropy_with_logits(x, t)
l.backward()
show("bce", l, x.grad, l.grad_fn.name())
x.grad = None
pw = torch.tensor([2.0, 0.5, 3.0, 1.5], dtype=f64)
tt = t.clone().requires_grad_(True)
l = torch.nn.functional.binary_cross_entropy_with_logits(x, tt, pos_weight=pw, reduction="sum")
l.backward()
show("bce_pw", l, x.grad, tt.grad)

# cross_entropy with every target ignored
x = torch.tensor([[1.0, 2.0], [0.5, -1.0]], dtype=f64, requires_grad=True)
l = torch.nn.functional.cross_entropy(x, torch.tensor([-100, -100]))
l.backward()
show("ce_all_ignored", l, x.grad, l.grad_fn.name())
x.grad = None
l = torch.nn.functional.cross_entropy(x, torch.tensor([1, -100]), reduction="sum")
l.backward()
show("ce_some_ignored_sum", l, x.grad)

# NaN propagation
x = torch.tensor([float("nan"), 1.0, -1.0], dtype=f64, requires_grad=True)
y = torch.relu(x)
y.sum().backward()
show("relu_nan", y, x.grad)
x = torch.tensor([1.0, float("nan"), 3.0], dtype=f64, requires_grad=True)
m = x.max()
m.backward()
show("max_nan", m, x.grad)
a = torch.tensor([1.0, float("nan"), 2.0], dtype=f64, requires_grad=True)
b = torch.tensor([float("nan"), 0.0, 2.0], dtype=f64, requires_grad=True)
y = torch.maximum(a, b)
y.sum().backward()
show("maximum_nan", y, a.grad, b.grad)
a.grad = None
b.grad = None
y = torch.minimum(a, b)
y.sum().backward()
show("minimum_nan", y, a.grad, b.grad)

# pow at 0^0
x = torch.tensor([0.0, 2.0], dtype=f64, requires_grad=True)
e = torch.tensor([0.0, 0.0], dtype=f64, requires_grad=True)
y = x.pow(e)
y.sum().backward()
show("pow_zero", y, x.grad, e.grad)

# sign backward
x = torch.tensor([-2.0, 0.0, 3.0], dtype=f64, requires_grad=True)
y = x.sign()
y.sum().backward()
show("sign", y, x.grad, y.grad_fn.name())

# log_softmax with inf
show("log_softmax_inf", torch.log_softmax(torch.tensor([float("inf"), 1.0], dtype=f64), 0))
show("log_softmax_neginf", torch.log_softmax(torch.tensor([float("-inf"), float("-inf")], dtype=f64), 0))

# empty batches
x = torch.zeros(0, 3, dtype=f64, requires_grad=True)
ls = torch.log_softmax(x, 1)
show("log_softmax_empty", list(ls.shape))
l = torch.nn.functional.cross_entropy(x, torch.zeros(0, dtype=torch.long))
l.backward()
show("ce_empty", l, list(x.grad.shape))

# 0-d promotion
a = torch.ones(2, dtype=torch.float32)
s = torch.tensor(2.0, dtype=f64)
show("promote", (a + s).dtype, (a * s).dtype, torch.where(torch.tensor([True, False]), a, s).dtype,
     (torch.tensor([1, 2]) + s).dtype, (torch.tensor(1.0) + s).dtype)

# norms and their gradients
for p in [2.0, 1.0, math.inf, -math.inf, 0.0, 3.0, 0.5, 1.5]:
    x = torch.tensor([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]], dtype=f64, requires_grad=True)
    n = torch.linalg.vector_norm(x, ord=p, dim=1)
    (n * torch.tensor([1.0, 2.0], dtype=f64)).sum().backward()
    show(f"norm_{p}", n, x.grad, n.grad_fn.name())
x = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=f64, requires_grad=True)
n = torch.linalg.vector_norm(x, ord=2)
n.backward()
show("norm_all", n, x.grad)

# argmax / argmin
x = torch.tensor([[1.0, 5.0, 5.0], [float("nan"), 2.0, 0.0]], dtype=f64)
show("argmax", torch.argmax(x), torch.argmax(x, 1), torch.argmin(x, 1), torch.argmin(x[0]))

# huber / smooth_l1 at the kink and around it
x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], dtype=f64, requires_grad=True)
y = torch.zeros(6, dtype=f64)
l = torch.nn.functional.huber_loss(x, y, delta=1.0, reduction="mean")
l.backward()
show("huber", l, x.grad, l.grad_fn.name())
x.grad = None
l = torch.nn.functional.smooth_l1_loss(x, y, beta=1.0, reduction="sum")
l.backward()
show("smooth_l1", l, x.grad, l.grad_fn.name())
x.grad = None
l = torch.nn.functional.smooth_l1_loss(x, y, beta=0.0, reduction="sum")
l.backward()
show("smooth_l1_beta0", l, x.grad)

# softplus around its threshold
x = torch.tensor([-1.0, 0.0, 19.9, 20.0, 20.1], dtype=f64, requires_grad=True)
y = torch.nn.functional.softplus(x)
y.sum().backward()
show("softplus", y, x.grad, y.grad_fn.name())

# f32 sums
show("sum_f32_tenth", torch.full((10_000_000,), 0.1, dtype=torch.float32).sum().item())
show("sum_f32_ones", torch.ones(20_000_000, dtype=torch.float32).sum().item())
