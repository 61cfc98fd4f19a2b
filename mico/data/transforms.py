"""Array transforms shared by the readers: resizing, per-channel normalization (no torchvision)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mico.data.split import DatasetSplit
from mico.errors import DatasetError

_RESIZE_CHUNK = 4096  # images resized at once, to bound the memory of large sets


def size_pair(size: int | Sequence[int]) -> tuple[int, int]:
    """``size`` as ``(height, width)``; a single int means a square."""
    pair = (int(size), int(size)) if isinstance(size, int | np.integer) else tuple(size)
    if len(pair) != 2 or min(pair) < 1:
        raise DatasetError(f"resize must be a positive int or (height, width), got {size!r}")
    return (int(pair[0]), int(pair[1]))


def resize_images(images: np.ndarray, size: int | Sequence[int]) -> np.ndarray:
    """Bilinear resize of float ``(N, C, H, W)`` images; antialiased when shrinking.

    Matches what torchvision's ``Resize`` does on tensors, so models trained on resized
    data see the same pixels here as with the original MiCo loaders.
    """
    if images.ndim != 4:
        raise DatasetError(f"resize needs (N, C, H, W) images, got shape {images.shape}")
    height, width = size_pair(size)
    if images.shape[2:] == (height, width):
        return images
    shrinking = height < images.shape[2] or width < images.shape[3]
    chunks = []
    for start in range(0, len(images), _RESIZE_CHUNK):
        batch = torch.from_numpy(np.ascontiguousarray(images[start : start + _RESIZE_CHUNK]))
        out = F.interpolate(
            batch.float(),
            size=(height, width),
            mode="bilinear",
            align_corners=False,
            antialias=shrinking,
        )
        chunks.append(out.numpy())
    if not chunks:
        return np.zeros((0, images.shape[1], height, width), dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32, copy=False)


def normalize_channels(x: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """``(x - mean) / std`` per channel (axis 1) of float ``(N, C, ...)`` data."""
    mean_arr = np.asarray(mean, dtype=np.float32)
    std_arr = np.asarray(std, dtype=np.float32)
    if mean_arr.shape != (x.shape[1],) or std_arr.shape != (x.shape[1],):
        raise DatasetError(
            f"normalization needs one mean and std per channel ({x.shape[1]}), "
            f"got {len(mean_arr)} and {len(std_arr)}"
        )
    if np.any(std_arr <= 0):
        raise DatasetError(f"normalization std must be positive, got {list(std)}")
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean_arr.reshape(shape)) / std_arr.reshape(shape)).astype(np.float32)


def image_split(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    classes: tuple[str, ...],
    resize: int | tuple[int, int] | None,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None,
    folder: Path,
    num_classes: int | None = None,
) -> DatasetSplit:
    """An image :class:`DatasetSplit` read from ``folder``, resized and normalized on request.

    ``num_classes`` defaults to the number of class names.
    """
    (x_train, y_train), (x_test, y_test) = train, test
    if resize is not None:
        x_train, x_test = resize_images(x_train, resize), resize_images(x_test, resize)
    if stats is not None:
        x_train = normalize_channels(x_train, *stats)
        x_test = normalize_channels(x_test, *stats)
    return DatasetSplit(
        name,
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=len(classes) if num_classes is None else num_classes,
        classes=classes,
        metadata={"folder": str(folder), "normalization": stats},
    )
