"""Feeds bad arguments to every public call on a ring of one; each must raise
TypeError or ValueError (or a KoloError), never crash. Prints 'BAD <n>'."""
import numpy as np
import torch

import kolo
import kolo.torch as hvd

hvd.init()
good = torch.ones(4)
cases = [
    (hvd.allreduce, (None,), {}), (hvd.allreduce, ("text",), {}), (hvd.allreduce, ([1, 2],), {}),
    (hvd.allreduce, (torch.ones(3, dtype=torch.complex128),), {}),
    (hvd.allreduce, (torch.ones(3, dtype=torch.bool),), {"op": hvd.Average}),
    (hvd.allreduce, (torch.ones(3, dtype=torch.complex64),), {}), (hvd.allreduce, (good,), {"op": 99}),
    (hvd.allreduce, (good,), {"op": "sum"}), (hvd.allreduce, (good,), {"op": hvd.Sum, "average": True}),
    (hvd.allreduce, (good,), {"name": "a\0b"}), (hvd.allreduce, (good,), {"name": "x" * 300}),
    (hvd.allreduce, (good,), {"name": 7}), (hvd.allreduce, (torch.ones(3, dtype=torch.int32),),
                                            {"prescale_factor": float("inf")}),
    (hvd.allreduce_, (torch.ones(4, 4).t(),), {}), (hvd.allreduce_async_, (torch.ones(4, 4)[:, 1],), {}),
    (hvd.allreduce, (torch.sparse_coo_tensor([[0]], [1.0], (3,)),), {}),
    (hvd.broadcast, (good, 5), {}), (hvd.broadcast, (good, -1), {}), (hvd.broadcast, (good, "0"), {}),
    (hvd.broadcast_, (torch.ones(4, 4).t(), 0), {}), (hvd.allgather, (object(),), {}),
    (hvd.grouped_allreduce, ([good, "x"],), {}), (hvd.reducescatter, (torch.tensor(1.0),), {}),
    (hvd.alltoall, (torch.ones(4), [1, 2]), {}), (hvd.alltoall, (torch.ones(4), [5]), {}),
    (hvd.alltoall, (torch.tensor(1.0),), {}),
    (hvd.synchronize, (12,), {}), (hvd.synchronize, (None,), {}), (hvd.poll, ("handle",), {}),
    (hvd.broadcast_parameters, (42,), {}), (hvd.broadcast_parameters, ([1, 2],), {}),
    (hvd.broadcast_optimizer_state, ("optimizer",), {}), (hvd.DistributedOptimizer, ("optimizer",), {}),
    (hvd.DistributedOptimizer, (torch.optim.SGD([torch.nn.Parameter(good)], lr=0.1),),
     {"backward_passes_per_step": 0}),
    (hvd.DistributedOptimizer, (torch.optim.SGD([torch.nn.Parameter(good)], lr=0.1),),
     {"named_parameters": [("a", torch.nn.Parameter(good))]}),
    (hvd.DistributedOptimizer, (torch.optim.SGD([torch.nn.Parameter(good)], lr=0.1),), {"named_parameters": [1]}),
    (hvd.DistributedOptimizer, (torch.optim.SGD([torch.nn.Parameter(good)], lr=0.1),), {"op": hvd.Sum,
                                                                                        "gradient_predivide_factor": 2.0}),
    (hvd.DistributedOptimizer, (torch.optim.SGD([torch.nn.Parameter(good)], lr=0.1),), {"compression": "fp16"}),
    (hvd.elastic.run(lambda state: None), ("not a state",), {}),
    (hvd.elastic.TorchState, ("model",), {}),
    (kolo.allreduce, (np.ones(3, dtype=np.complex64),), {}), (kolo.allreduce, ("abc",), {}),
    (kolo.allreduce_, (np.ones(3)[::2],), {}), (kolo.allreduce_, (bytes(4),), {}),
    (kolo.broadcast, (np.ones(3), 3), {}), (kolo.alltoall, (np.ones(3), [1, 1]), {}),
    (kolo.report, (), {"loss": float("nan")}), (kolo.report, (), {"obj": object()}),
]
bad = 0
for function, args, kwargs in cases:
    try:
        function(*args, **kwargs)
    except (TypeError, ValueError, kolo.KoloError, NotImplementedError):
        bad += 1
    else:
        raise AssertionError("%s%r %r did not raise" % (getattr(function, "__name__", function), args, kwargs))
print("BAD %d of %d" % (bad, len(cases)), flush=True)
