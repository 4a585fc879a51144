"""kolo.Runner end to end: a PyTorch training function written the Horovod way
(kolo.torch), shipped to the cluster by one call, trained data-parallel on np
workers, with rank 0's prints streamed here and its return value brought back.

    /usr/bin/python3 examples/runner/fashion_mnist.py --server 127.0.0.1:7070 --np 2
    /usr/bin/python3 examples/runner/fashion_mnist.py --np -2      # 2 local processes, no server

examples/runner/run.sh starts a private cluster and runs this in one command."""
import argparse

import kolo

DATA = "/usr/share/datasets/fashion-mnist"


def train(lr, epochs=1, batch_size=64, samples=12000):
    """Runs on every rank (under kolo.init()); returns the test accuracy on rank 0."""
    import gzip

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import kolo.torch as hvd

    hvd.init()
    torch.manual_seed(1)
    torch.set_num_threads(1)

    def idx(name, offset):
        with gzip.open("%s/%s" % (DATA, name)) as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

    x = torch.tensor(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:samples], dtype=torch.float32) / 255
    y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8)[:samples], dtype=torch.long)
    tx = torch.tensor(idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784), dtype=torch.float32) / 255
    ty = torch.tensor(idx("t10k-labels-idx1-ubyte.gz", 8), dtype=torch.long)
    shard = slice(hvd.rank(), None, hvd.size())  # every rank its own part of the data
    x, y = x[shard], y[shard]

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(x) - batch_size + 1, batch_size):
            batch = order[start:start + batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        mean_loss = hvd.allreduce(loss.detach(), name="loss").item()
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f on %d workers" % (epoch + 1, mean_loss, hvd.size()), flush=True)
    with torch.no_grad():
        accuracy = (model(tx).argmax(dim=1) == ty).float().mean().item()
    return accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=None, help="kolo-server's gRPC address (default $KOLO_SERVER)")
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    accuracy = kolo.Runner(np=args.np, server=args.server, timeout=900).run(train, args.lr, epochs=args.epochs)
    print("test accuracy returned by rank 0: %.4f" % accuracy)
    return 0 if accuracy > 0.7 else 1


if __name__ == "__main__":
    raise SystemExit(main())
