"""Synthetic training throughput with kolo.torch, like Horovod's
pytorch_synthetic_benchmark.py: a torchvision model on fixed random data,
DistributedOptimizer, img/sec per rank and in total.

    kolorun -np 2 python3 examples/pytorch/synthetic_benchmark.py --model resnet18 --image-size 64
"""
import argparse
import statistics
import sys
import timeit

import torch
import torch.nn.functional as F
import torchvision.models

import kolo.torch as hvd

parser = argparse.ArgumentParser(description="kolo.torch synthetic benchmark")
parser.add_argument("--model", default="resnet18", help="a torchvision.models name")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--num-classes", type=int, default=1000)
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
parser.add_argument("--no-distributed", action="store_true", help="plain torch optimizer (a 1-rank baseline)")


def main() -> None:
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    try:
        model = getattr(torchvision.models, args.model)(num_classes=args.num_classes)
    except AttributeError:
        sys.exit("unknown torchvision model %r" % args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    if not args.no_distributed:
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))

    def benchmark_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(text: str) -> None:
        if hvd.rank() == 0:
            print(text, flush=True)

    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    log("Number of CPUs: %d" % hvd.size())
    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log("Running benchmark...")
    rates = []
    for iteration in range(args.num_iters):
        elapsed = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / elapsed
        log("Iter #%d: %.1f img/sec per CPU" % (iteration, rate))
        rates.append(rate)
    mean = statistics.mean(rates)
    deviation = 1.96 * statistics.pstdev(rates)
    log("Img/sec per CPU: %.1f +-%.1f" % (mean, deviation))
    total = hvd.allreduce(torch.tensor(mean, dtype=torch.float64), op=hvd.Sum, name="total_rate").item()
    log("Total img/sec on %d CPU(s): %.1f +-%.1f" % (hvd.size(), total, hvd.size() * deviation))
    hvd.shutdown()


if __name__ == "__main__":
    main()
