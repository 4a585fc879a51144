"""A bag-of-words text classifier with a sparse embedding table, written as a
Horovod script: kolo.torch runs it with only the import line changed.

nn.EmbeddingBag(sparse=True) makes sparse gradients: DistributedOptimizer
all-gathers their indices and values (Horovod's sparse_allreduce_async), or with
--sparse-as-dense turns them dense and all-reduces them. The data are synthetic
reviews: tokens 0-99 are positive words, 100-199 negative ones, the rest
neutral; a review is positive when it has more positive than negative words.

    kolorun -np 2 python3 examples/pytorch/embedding_sparse.py
"""
import argparse

import torch
import torch.nn.functional as F
import torch.utils.data.distributed

import kolo.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser(description="sparse-embedding text classifier (Horovod style)")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32, help="reviews per rank and batch")
parser.add_argument("--lr", type=float, default=5.0)
parser.add_argument("--vocab", type=int, default=2000)
parser.add_argument("--sparse-as-dense", action="store_true")
parser.add_argument("--seed", type=int, default=42)


def reviews(count, vocab, seed):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (count, 24), generator=generator)
    sentiment = torch.randint(0, 2, (count,), generator=generator)
    # a few sentiment words per review, the rest neutral
    words = torch.randint(0, 100, (count, 4), generator=generator) + 100 * (1 - sentiment).unsqueeze(1)
    tokens[:, :4] = words
    positive = (tokens < 100).sum(1)
    negative = ((tokens >= 100) & (tokens < 200)).sum(1)
    return torch.utils.data.TensorDataset(tokens, (positive > negative).long())


class Classifier(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(vocab, 16, mode="mean", sparse=True)
        self.out = torch.nn.Linear(16, 2)

    def forward(self, tokens):
        return self.out(self.embedding(tokens))


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_set = reviews(4096, args.vocab, args.seed)
    test_set = reviews(1024, args.vocab, args.seed + 1)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_set, num_replicas=hvd.size(),
                                                                    rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(test_set, num_replicas=hvd.size(),
                                                                   rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = Classifier(args.vocab)
    # SGD handles sparse gradients; scale the learning rate by the number of workers
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         sparse_as_dense=args.sparse_as_dense)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for tokens, labels in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            optimizer.step()
        model.eval()
        correct, total, test_loss = 0.0, 0.0, 0.0
        with torch.no_grad():
            for tokens, labels in test_loader:
                logits = model(tokens)
                test_loss += F.cross_entropy(logits, labels, reduction="sum").item()
                correct += (logits.argmax(1) == labels).sum().item()
                total += len(labels)
        accuracy = metric_average(correct / total, "avg_accuracy")
        test_loss = metric_average(test_loss / total, "avg_loss")
        if hvd.rank() == 0:
            print("Epoch %d: test loss %.4f, accuracy %.2f%%" % (epoch, test_loss, 100 * accuracy), flush=True)


if __name__ == "__main__":
    main()
