"""Elastic data-parallel Fashion-MNIST with kolo.torch.elastic, run as a kolo
job: when a worker dies or joins, the surviving processes stay alive, the ring
re-forms, the model, optimizer and data position roll back to the last commit
(every --batches-per-commit batches; with 1 a failure costs at most the batch in flight)
and are broadcast from the new rank 0, the learning rate is rescaled to the new
number of ranks (hvd.lr_scale()), and training resumes.

    kolo submit --name efmnist --workers 2:4 --exec python3 examples/pytorch/elastic_fashion_mnist.py

The same script trains in whichever mode the job asks for (--mode diloco
--average-every 50, ...): hvd.DistributedOptimizer reads it from the job, and
hvd.join() at the end of training ends the mode's rounds (every rank then holds
the same model). See docs/PYTHON.md.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion  # noqa: E402
import kolo.torch as hvd  # noqa: E402

parser = argparse.ArgumentParser(description="kolo.torch elastic Fashion-MNIST example")
parser.add_argument("--model", default="mlp", choices=["net", "mlp"])
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01,
                    help="learning rate of one rank (times hvd.lr_scale(): the ranks in SYNC, else 1)")
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--batches-per-commit", type=int, default=20,
                    help="commit every N batches (1: a failure costs at most the batch in flight)")
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--data-dir", default=fashion.DATA_DIR)
parser.add_argument("--sleep-ms", type=int, default=0, help="pause per batch (to watch a ring change)")
parser.add_argument("--markers", default="", help="directory for start-/end-<worker>-<pid> files (tests)")


def marker(directory: str, kind: str) -> None:
    if directory:
        open(os.path.join(directory, "%s-%s-%d" % (kind, os.environ.get("KOLO_WORKER_ID", "none"), os.getpid())),
             "w").close()


def main() -> None:
    args = parser.parse_args()
    marker(args.markers, "start")
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_dataset = fashion.dataset(True, args.data_dir)
    test_dataset = fashion.dataset(False, args.data_dir)

    model = fashion.model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.lr_scale(), momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, commit_every=args.batches_per_commit, sampler=sampler,
                                   epoch=1, batches=0)

    def on_reset() -> None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.lr_scale()
        if hvd.rank() == 0:
            print("ring changed: %d ranks, lr %.4f" % (hvd.size(), args.lr * hvd.lr_scale()), flush=True)

    state.register_reset_callbacks([on_reset])
    total = args.epochs * len(train_dataset) // args.batch_size  # batches at one rank, for progress

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.epoch <= args.epochs:
            model.train()
            sampler.set_epoch(state.epoch)
            for batch_idx, (data, target) in enumerate(loader):
                optimizer.zero_grad()
                loss = F.nll_loss(model(data), target)
                loss.backward()
                optimizer.step()
                sampler.record_batch(batch_idx, args.batch_size)
                state.batches += 1
                state.step_done()  # commits every --batches-per-commit batches
                if state.batches % 20 == 0:
                    hvd.report(step=state.batches * hvd.size(), total_steps=total, loss=loss.item())
                if args.sleep_ms:
                    time.sleep(args.sleep_ms / 1000.0)
            if hvd.rank() == 0:
                print("epoch %d done (%d ranks, loss %.4f)" % (state.epoch, hvd.size(), loss.item()), flush=True)
            state.epoch += 1
            state.commit()
        hvd.join()  # a non-SYNC mode: the last round, the same model on every rank

    train(state)

    model.eval()
    shard = torch.utils.data.Subset(test_dataset, range(hvd.rank(), len(test_dataset), hvd.size()))
    correct = 0.0
    with torch.no_grad():
        for data, target in torch.utils.data.DataLoader(shard, batch_size=1000):
            correct += model(data).argmax(1).eq(target).float().sum().item()
    counts = hvd.allreduce(torch.tensor([correct, float(len(shard))], dtype=torch.float64), op=hvd.Sum)
    accuracy = (counts[0] / counts[1]).item()
    if hvd.rank() == 0:
        print("Test accuracy: %.2f%% (%d ranks, %d re-forms)" % (100 * accuracy, hvd.size(),
                                                                 hvd.elastic.reconfigurations()), flush=True)
    hvd.report(step=total, total_steps=total, accuracy=accuracy)
    hvd.shutdown()
    marker(args.markers, "end")


if __name__ == "__main__":
    main()
