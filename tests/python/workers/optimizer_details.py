"""DistributedOptimizer details on N ranks: fp16 compression rounds what goes
over the ring, too many backward passes are refused, skip_synchronize, and
zero_grad during a reduction. Prints 'OK <n>'."""
import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
checks = 0

# fp16 compression: the gradients travel and are reduced as float16 (kolo rounds
# back to float16 after each reduction step), so the result is float16-exact and
# close to, but not, the float32 average
p = torch.nn.Parameter(torch.zeros(3))
opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), named_parameters=[("p", p)],
                               compression=hvd.Compression.fp16)
grad = torch.tensor([1 / 3, 0.1, 1000.0 + rank * 0.3], dtype=torch.float32)
(p * grad).sum().backward()
opt.synchronize()
halves = torch.stack([torch.tensor([1 / 3, 0.1, 1000.0 + r * 0.3]).half().float() for r in range(size)])
want = (halves.sum(0) / size).half().float()
assert p.grad.dtype == torch.float32 and torch.allclose(p.grad, want, rtol=2e-3, atol=0), (p.grad, want)
assert torch.equal(p.grad.half().float(), p.grad), p.grad
exact = torch.stack([torch.tensor([1 / 3, 0.1, 1000.0 + r * 0.3]) for r in range(size)]).mean(0)
assert not torch.equal(p.grad, exact)
with opt.skip_synchronize():
    opt.step()
assert torch.equal(p.detach(), -p.grad)
checks += 1

# more backward passes than backward_passes_per_step is refused
q = torch.nn.Parameter(torch.ones(2))
opt = hvd.DistributedOptimizer(torch.optim.SGD([q], lr=0.1), named_parameters=[("q", q)], backward_passes_per_step=2)
(q * 2).sum().backward()
(q * 2).sum().backward()
try:
    (q * 2).sum().backward()
except AssertionError as error:
    assert "backward_passes_per_step" in str(error)
    checks += 1
else:
    raise AssertionError("a third backward pass was accepted")
opt.synchronize()
# two passes accumulate locally (their sum, horovod's semantics), then one average over ranks
q = torch.nn.Parameter(torch.ones(2))
opt = hvd.DistributedOptimizer(torch.optim.SGD([q], lr=0.1), named_parameters=[("q2", q)], backward_passes_per_step=2)
(q * (rank + 1.0)).sum().backward()
(q * (rank + 1.0)).sum().backward()
opt.step()
assert q.grad.tolist() == [2 * sum(k + 1.0 for k in range(size)) / size] * 2, q.grad
checks += 1

# zero_grad while reductions are outstanding is refused
r = torch.nn.Parameter(torch.ones(2))
opt = hvd.DistributedOptimizer(torch.optim.SGD([r], lr=0.1), named_parameters=[("r", r)])
(r * (rank + 1.0)).sum().backward()
try:
    opt.zero_grad()
except AssertionError:
    checks += 1
else:
    raise AssertionError("zero_grad during a reduction was accepted")
opt.step()
assert r.grad.tolist() == [sum(k + 1.0 for k in range(size)) / size] * 2, r.grad
checks += 1

# the wrapped optimizer is still an instance of its class, and keeps its state
m = torch.nn.Linear(2, 2)
adam = torch.optim.Adam(m.parameters(), lr=0.1)
m(torch.ones(1, 2)).sum().backward()
adam.step()
wrapped = hvd.DistributedOptimizer(adam, named_parameters=m.named_parameters())
assert isinstance(wrapped, torch.optim.Adam) and len(wrapped.state) == 2
checks += 1

print("OK %d" % checks, flush=True)
