"""A training script written for Horovod (the shape of horovod's
pytorch_mnist.py, on synthetic data so it runs in seconds). The test runs it
after changing only the import line below to `import kolo.torch as hvd`."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed
import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--batches-per-allreduce", type=int, default=1)
args = parser.parse_args()

hvd.init()
torch.manual_seed(42)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv(x), 2))
        return F.log_softmax(self.fc(x.view(-1, 4 * 6 * 6)), dim=1)


generator = torch.Generator().manual_seed(7)
images = torch.randn(256, 1, 14, 14, generator=generator)
labels = (images[:, :, :7].mean(dim=(1, 2, 3)) > 0).long() + (images[:, :, 7:].mean(dim=(1, 2, 3)) > 0).long()
dataset = torch.utils.data.TensorDataset(images, labels)
train_sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size * args.batches_per_allreduce,
                                           sampler=train_sampler)

model = Net()
lr_scaler = args.batches_per_allreduce * hvd.size()
optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression,
                                     backward_passes_per_step=args.batches_per_allreduce, op=hvd.Average)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


for epoch in range(1, args.epochs + 1):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        for i in range(0, len(data), args.batch_size):
            data_batch = data[i:i + args.batch_size]
            target_batch = target[i:i + args.batch_size]
            output = model(data_batch)
            loss = F.nll_loss(output, target_batch)
            loss.div_(args.batches_per_allreduce)
            loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        output = model(images)
        test_loss = F.nll_loss(output, labels).item()
        accuracy = output.argmax(1).eq(labels).float().mean().item()
    test_loss = metric_average(test_loss, "avg_loss")
    accuracy = metric_average(accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print("EPOCH %d loss %.4f accuracy %.3f" % (epoch, test_loss, accuracy), flush=True)
digest = sum(p.detach().double().sum().item() for p in model.parameters())
print("DIGEST %.10f" % digest, flush=True)
