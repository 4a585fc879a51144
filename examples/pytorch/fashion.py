"""Fashion-MNIST from Debian's dataset-fashion-mnist package (IDX files, gzip),
as torch datasets: 60000 training and 10000 test images, 28x28, 10 classes,
normalised with the training set's mean and deviation. No download."""
import gzip
import os

import numpy as np
import torch

DATA_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def dataset(train: bool, data_dir: str = DATA_DIR) -> torch.utils.data.TensorDataset:
    """(images as float (N, 1, 28, 28), labels as int64 (N,))."""
    prefix = "train" if train else "t10k"
    images = _idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % prefix))
    labels = _idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % prefix))
    x = (torch.from_numpy(images.copy()).float().div_(255.0).sub_(MEAN).div_(STD)).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(torch.nn.Module):
    """The network of Horovod's PyTorch MNIST example (two convolutions, two
    fully connected layers, dropout)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = torch.nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = torch.nn.Dropout2d()
        self.fc1 = torch.nn.Linear(320, 50)
        self.fc2 = torch.nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.nn.functional
        x = f.relu(f.max_pool2d(self.conv1(x), 2))
        x = f.relu(f.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = f.relu(self.fc1(x.view(-1, 320)))
        x = f.dropout(x, training=self.training)
        return f.log_softmax(self.fc2(x), dim=1)


class MLP(torch.nn.Module):
    """784-128-10, the built-in trainer's MLP."""

    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(784, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.relu(self.fc1(x.view(x.shape[0], -1)))
        return torch.nn.functional.log_softmax(self.fc2(x), dim=1)


def model(name: str) -> torch.nn.Module:
    if name == "net":
        return Net()
    if name == "mlp":
        return MLP()
    raise ValueError("unknown model %r (net or mlp)" % name)
