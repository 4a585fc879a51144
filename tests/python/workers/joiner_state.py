"""A joiner's state after TorchState.sync(): ranks 0 and 1 (survivors) train three
Adam steps from the same start; the last rank (a newcomer) has another model and an
optimizer that never stepped. After sync() every rank's model and optimizer tensors
(the step counters, both moments) must equal rank 0's bit for bit: each tensor's bytes
are compared by an all-reduce of Max and of Min over them as integers. Prints
"SAME <n tensors>"."""
import torch

import kolo.torch as hvd

hvd.init()
torch.set_num_threads(1)
joiner = hvd.rank() == hvd.size() - 1
torch.manual_seed(99 if joiner else 0)
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.BatchNorm1d(24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
state = hvd.elastic.TorchState(model, optimizer, step=0)
if not joiner:
    for step in range(3):
        generator = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 12, generator=generator), torch.randint(0, 3, (16,), generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        state.step += 1
        state.commit()
state.sync()

tensors = list(model.state_dict().items())
for index, per_param in sorted(optimizer.state_dict()["state"].items()):
    tensors += [("optim.%d.%s" % (index, key), value) for key, value in sorted(per_param.items())
                if isinstance(value, torch.Tensor)]
assert state.step == 3, state.step
for name, tensor in tensors:
    bits = tensor.detach().contiguous().view(-1).view(torch.uint8).to(torch.int32)
    high = hvd.allreduce(bits, op=hvd.Max, name="max." + name)
    low = hvd.allreduce(bits, op=hvd.Min, name="min." + name)
    assert torch.equal(high, bits) and torch.equal(low, bits), "%s differs between ranks" % name
print("SAME %d" % len(tensors), flush=True)
hvd.shutdown()
