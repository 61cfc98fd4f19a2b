"""MNIST and Fashion-MNIST read from the four IDX files the user placed under the data root."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mico.data.idx import read_idx
from mico.data.paths import DATA_ENV, corrupt, data_root, most_complete, pick
from mico.data.split import DatasetSplit
from mico.data.transforms import image_split
from mico.errors import DatasetError

IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
MNIST_STATS = ((0.1307,), (0.3081,))  # pixel mean and std of the MNIST training set
FASHION_STATS = ((0.2860,), (0.3530,))
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
PIXEL_MAX = 255.0
MNIST_SHAPE = (28, 28)  # every image of MNIST and Fashion-MNIST


def mnist_folders(root: Path, subdir: str) -> list[Path]:
    """Folders searched, in order: the root itself, torchvision's ``<subdir>/raw``, ``<subdir>``."""
    return [root, root / subdir / "raw", root / subdir]


def read_mnist(
    root: str | os.PathLike[str] | None = None,
    resize: int | tuple[int, int] | None = None,
    normalize: bool = False,
) -> DatasetSplit:
    """MNIST as float32 ``(N, 1, 28, 28)`` in [0, 1] (60000 train / 10000 test), labels 0..9.

    ``resize`` gives other image sizes; ``normalize`` standardizes with MNIST's mean and std.
    """
    return _read_idx_set(
        "mnist", "MNIST", root, "MNIST", resize, MNIST_STATS if normalize else None, ()
    )


def read_fashion_mnist(
    root: str | os.PathLike[str] | None = None,
    resize: int | tuple[int, int] | None = None,
    normalize: bool = False,
) -> DatasetSplit:
    """Fashion-MNIST: same files, format and shapes as MNIST, ten clothing classes."""
    stats = FASHION_STATS if normalize else None
    return _read_idx_set(
        "fashion_mnist", "Fashion-MNIST", root, "FashionMNIST", resize, stats, FASHION_CLASSES
    )


def _read_idx_set(
    name: str,
    title: str,
    root: str | os.PathLike[str] | None,
    subdir: str,
    resize: int | tuple[int, int] | None,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None,
    classes: tuple[str, ...],
) -> DatasetSplit:
    base = data_root(root)
    required = [f"{f}|{f}.gz" for f in IDX_FILES]
    folders = mnist_folders(base, subdir)
    found, folder, missing = most_complete(folders, required)
    if missing:
        raise _not_found(title, folders, folder if found else None, missing)
    paths = [pick(folder, name) for name in required]
    x_train, y_train = _images_and_labels(paths[0], paths[1])
    x_test, y_test = _images_and_labels(paths[2], paths[3])
    return image_split(
        name, (x_train, y_train), (x_test, y_test), classes, resize, stats, folder, num_classes=10
    )


def _not_found(
    title: str, folders: list[Path], partial: Path | None, missing: list[str]
) -> DatasetError:
    """One line: what is missing, where mico looked, and the four file names it wants."""
    if partial is None:
        what = f"no {title} files in {folders[0]}"
    else:
        files = ", ".join(m.split("|")[0] for m in missing)
        what = f"missing {files} in {partial}"
    others = ", ".join(str(f) for f in folders if f != (partial or folders[0]))
    return DatasetError(
        f"{title} data not found: {what} (also looked in {others}); place "
        f"{', '.join(IDX_FILES)} (or .gz) there; mico never downloads: pass root=... "
        f"or set {DATA_ENV}"
    )


def _images_and_labels(image_path: Path, label_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(image_path, ndim=3)
    labels = read_idx(label_path, ndim=1)
    if images.dtype != np.uint8:
        raise corrupt(image_path, f"MNIST images must be unsigned bytes, got {images.dtype}")
    if labels.dtype != np.uint8:
        raise corrupt(label_path, f"MNIST labels must be unsigned bytes, got {labels.dtype}")
    if images.shape[1:] != MNIST_SHAPE:
        raise corrupt(
            image_path,
            f"images are {images.shape[1]}x{images.shape[2]} but MNIST images are "
            f"{MNIST_SHAPE[0]}x{MNIST_SHAPE[1]}; this is not an MNIST file",
        )
    if len(images) != len(labels):
        raise corrupt(
            label_path, f"{len(labels)} labels for the {len(images)} images of {image_path.name}"
        )
    if labels.size and labels.max() > 9:
        raise corrupt(label_path, f"label {int(labels.max())} outside 0..9")
    x = (images.astype(np.float32) / PIXEL_MAX)[:, None, :, :]
    return x, labels.astype(np.int64)
