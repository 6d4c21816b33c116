"""cnn_epoch_torch: the digits CNN's training epoch in PyTorch, the peer of bench/cnn_epoch.cpp.

bench/cnn_epoch.sh runs both in one invocation. The model, the data and the loop are the same on
both sides:

  Conv2d(1, 16, 3, padding 1) ReLU MaxPool2d(2)  (B, 1, 8, 8) -> (B, 16, 4, 4)
  Conv2d(16, 32, 3, padding 1) ReLU MaxPool2d(2)              -> (B, 32, 2, 2)
  Flatten Linear(128, 10), cross-entropy, Adam (lr 1e-3)

over the 1797 images in batches of 32 (the last one 5), in the order of the data file. MODEL mlp
trains the digits MLP instead: Flatten Linear(64, 128) ReLU Linear(128, 10).

    python3 bench/cnn_epoch_torch.py data FILE
        writes the data set: sklearn's digits (pixels / 16) where sklearn is installed, else
        digits-shaped data drawn from a fixed seed (1797 images of 8 x 8 in 10 classes); its first
        line on stdout says which. FILE holds int64 n, n * 64 float32 pixels, n int32 labels.
    python3 bench/cnn_epoch_torch.py time FILE THREADS EPOCHS [MODEL]
        one warm-up epoch, then EPOCHS epochs; prints "epoch_ms X" for each and the last loss.
"""
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

BATCH = 32


def digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return generated_digits(), "generated digits-shaped data (sklearn is not installed)"
    d = load_digits()
    rng = np.random.default_rng(37)
    order = rng.permutation(len(d.target))
    return (d.images[order].astype(np.float32) / 16.0, d.target[order].astype(np.int32)), "sklearn's digits"


def generated_digits(n=1797, classes=10, seed=37):
    """Ten fixed 8 x 8 strokes of values in [0, 1], each image one of them shifted by up to a
    pixel, scaled, with noise, rounded to sixteenths as the real digits are."""
    rng = np.random.default_rng(seed)
    prototypes = (rng.random((classes, 10, 10)) > 0.6).astype(np.float32)
    labels = rng.integers(0, classes, n).astype(np.int32)
    images = np.empty((n, 8, 8), np.float32)
    for i, c in enumerate(labels):
        dy, dx = rng.integers(0, 3, 2)
        image = prototypes[c, dy:dy + 8, dx:dx + 8] * rng.uniform(0.6, 1.0) + rng.normal(0, 0.15, (8, 8))
        images[i] = np.round(np.clip(image, 0, 1) * 16) / 16
    return images, labels


def write_data(path):
    (images, labels), what = digits()
    with open(path, "wb") as f:
        f.write(struct.pack("<q", len(labels)))
        f.write(np.ascontiguousarray(images, np.float32).tobytes())
        f.write(np.ascontiguousarray(labels, np.int32).tobytes())
    print(f"data: {what}, {len(labels)} images of 8 x 8, {int(labels.max()) + 1} classes")


def read_data(path):
    with open(path, "rb") as f:
        n = struct.unpack("<q", f.read(8))[0]
        images = np.frombuffer(f.read(n * 64 * 4), np.float32).reshape(n, 1, 8, 8)
        labels = np.frombuffer(f.read(n * 4), np.int32)
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def time_epochs(path, threads, epochs, model_name="cnn"):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = read_data(path)
    if model_name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    n = len(y)
    loss = None
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        for i in range(0, n, BATCH):
            opt.zero_grad()
            loss = loss_fn(model(x[i:i + BATCH]), y[i:i + BATCH])
            loss.backward()
            opt.step()
        last = loss.item()
        ms = (time.perf_counter() - start) * 1e3
        if epoch > 0:  # the first is the warm-up
            print(f"epoch_ms {ms:.3f}")
    print(f"loss {last:.4f} threads {torch.get_num_threads()} torch {torch.__version__}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "data":
        write_data(sys.argv[2])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "time" and sys.argv[5:] in ([], ["cnn"], ["mlp"]):
        time_epochs(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
