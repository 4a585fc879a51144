"""Contrastive (SimCLR/CLIP-style) training over the global batch, written as a
Horovod script: kolo.torch runs it with only the import line changed.

Each rank embeds two noisy views of its samples, all-gathers the second views'
embeddings from every rank (hvd.allgather, differentiated through: the negatives
of the InfoNCE loss are the whole global batch), and matches each of its first
views against all of them. The data are synthetic: a sample is 8 numbers, a
view of it those numbers (slightly perturbed) beside 24 dimensions of loud
noise that the encoder has to learn to ignore; the test measures how often a
view's nearest neighbour among 256 held-out second views is its own pair
(under 1% for the untrained encoder).

    kolorun -np 2 python3 examples/pytorch/contrastive_allgather.py
"""
import argparse

import torch
import torch.nn.functional as F

import kolo.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser(description="contrastive learning through allgather (Horovod style)")
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--temperature", type=float, default=0.1)
parser.add_argument("--seed", type=int, default=42)

SIGNAL, NOISE = 8, 24


def views(samples, generator):
    """Two views of each sample: its numbers, slightly perturbed, and loud noise."""
    def view():
        return torch.cat([samples + 0.1 * torch.randn(samples.shape, generator=generator),
                          2.0 * torch.randn(len(samples), NOISE, generator=generator)], 1)
    return view(), view()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(args.seed + 1 + hvd.rank())  # each rank its own samples

    encoder = torch.nn.Sequential(torch.nn.Linear(SIGNAL + NOISE, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    optimizer = torch.optim.Adam(encoder.parameters(), lr=args.lr)
    hvd.broadcast_parameters(encoder.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=encoder.named_parameters())

    for step in range(1, args.steps + 1):
        first, second = views(torch.randn(args.batch_size, SIGNAL, generator=data), data)
        queries = F.normalize(encoder(first), dim=1)
        keys = F.normalize(encoder(second), dim=1)
        all_keys = hvd.allgather(keys, name="keys")  # every rank's keys: the global batch's negatives
        logits = queries @ all_keys.t() / args.temperature
        labels = torch.arange(args.batch_size) + hvd.rank() * args.batch_size
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            loss = hvd.allreduce(loss.detach(), name="avg_loss").item()
            if hvd.rank() == 0:
                print("Step %d: loss %.4f" % (step, loss), flush=True)

    # held-out retrieval: the same 256 pairs on every rank
    test = torch.Generator().manual_seed(args.seed + 1000)
    first, second = views(torch.randn(256, SIGNAL, generator=test), test)
    with torch.no_grad():
        similarity = F.normalize(encoder(first), dim=1) @ F.normalize(encoder(second), dim=1).t()
    accuracy = (similarity.argmax(1) == torch.arange(256)).float().mean()
    accuracy = hvd.allreduce(accuracy, name="avg_accuracy").item()
    if hvd.rank() == 0:
        print("Retrieval accuracy: %.2f%%" % (100 * accuracy), flush=True)


if __name__ == "__main__":
    main()
