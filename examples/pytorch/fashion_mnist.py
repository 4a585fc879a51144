"""Data-parallel Fashion-MNIST with kolo.torch, in the shape of Horovod's PyTorch
MNIST example: each rank trains on its share of the data (DistributedSampler by
rank), gradients are averaged by DistributedOptimizer while backward runs, rank
0's parameters and optimizer state are broadcast at the start, and the test
metrics are averaged over ranks. The defaults (the MLP, 3 epochs, 32 per rank, momentum
0.9) reach about 86% test accuracy with 2 ranks; --model net is Horovod's convolutional
net (slower on CPU).

    kolorun -np 2 /usr/bin/python3 examples/pytorch/fashion_mnist.py
    kolo submit --name fmnist --workers 2 --exec /usr/bin/python3 $PWD/examples/pytorch/fashion_mnist.py
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.data.distributed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion  # noqa: E402
import kolo.torch as hvd  # noqa: E402

parser = argparse.ArgumentParser(description="kolo.torch Fashion-MNIST example")
parser.add_argument("--model", default="mlp", choices=["net", "mlp"])
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--test-batch-size", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank (scaled by the ranks)")
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--log-interval", type=int, default=100, help="batches between progress lines")
parser.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16 on the ring")
parser.add_argument("--use-adasum", action="store_true", help="not supported by kolo (refused)")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--data-dir", default=fashion.DATA_DIR)
parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
parser.add_argument("--limit-batches", type=int, default=0, help="stop each epoch after this many batches")
parser.add_argument("--checkpoint-dir", default=None,
                    help="checkpoint every epoch here and resume from the newest (default: the job's "
                         "checkpoint_dir, $KOLO_CHECKPOINT_DIR; none: no checkpoints)")


def main() -> None:
    args = parser.parse_args()
    if args.use_adasum:
        sys.exit("kolo has no Adasum; drop --use-adasum")
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    train_dataset = fashion.dataset(True, args.data_dir)
    test_dataset = fashion.dataset(False, args.data_dir)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, num_replicas=hvd.size(),
                                                                    rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(test_dataset, num_replicas=hvd.size(),
                                                                   rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = fashion.model(args.model)
    # the learning rate grows with the ranks: the global batch is batch-size x ranks
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    # rank 0 writes a checkpoint after each epoch (asynchronously, atomically, the last 2 kept);
    # a restarted job (a lost worker restarts a script without kolo.elastic) resumes from it
    checkpoints = hvd.Checkpointer(args.checkpoint_dir, keep=2)
    first_epoch = max(1, checkpoints.restore(model, optimizer))
    if first_epoch > 1 and hvd.rank() == 0:
        print("Resuming after epoch {} from {}".format(first_epoch - 1, checkpoints.folder), flush=True)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    def train(epoch: int) -> None:
        model.train()
        train_sampler.set_epoch(epoch)
        started = time.monotonic()
        for batch_idx, (data, target) in enumerate(train_loader):
            if args.limit_batches and batch_idx >= args.limit_batches:
                break
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                done = batch_idx * len(data)
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, done, len(train_sampler), 100.0 * batch_idx / len(train_loader), loss.item()), flush=True)
                hvd.report(step=(epoch - 1) * len(train_loader) + batch_idx,
                           total_steps=args.epochs * len(train_loader), loss=loss.item())
        if hvd.rank() == 0:
            print("Epoch {} took {:.1f}s".format(epoch, time.monotonic() - started), flush=True)

    def metric_average(value: float, name: str) -> float:
        return hvd.allreduce(torch.tensor(value), name=name).item()

    def test() -> float:
        model.eval()
        test_loss, correct = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(1).eq(target).float().sum().item()
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(test_loss, 100.0 * accuracy),
                  flush=True)
        return accuracy

    accuracy = 0.0
    for epoch in range(first_epoch, args.epochs + 1):
        train(epoch)
        accuracy = test()
        checkpoints.save(epoch, model=model, optimizer=optimizer)
    checkpoints.close()
    hvd.report(step=args.epochs * len(train_loader), total_steps=args.epochs * len(train_loader),
               accuracy=accuracy)
    hvd.shutdown()


if __name__ == "__main__":
    main()
