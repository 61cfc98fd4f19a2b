"""scikit-learn's bundled 8x8 digits: mico's default data set, available offline everywhere."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from mico.data.split import DatasetSplit
from mico.data.transforms import resize_images
from mico.errors import DatasetError

DIGITS_MAX = 16.0  # pixel values of the digits set are integers 0..16


def digits(
    seed: int = 0, test_fraction: float = 0.2, resize: int | tuple[int, int] | None = None
) -> DatasetSplit:
    """The 1797 digits as float32 ``(N, 1, 8, 8)`` images in [0, 1], split stratified by seed.

    ``resize`` (e.g. 28) upsamples bilinearly, so MNIST-sized models can train offline.
    """
    if not 0.0 < test_fraction < 1.0:
        raise DatasetError(
            f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}"
        )
    bunch = load_digits()
    images = (bunch.images.astype(np.float32) / DIGITS_MAX)[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=seed, stratify=labels
    )
    if resize is not None:
        x_train, x_test = resize_images(x_train, resize), resize_images(x_test, resize)
    return DatasetSplit(
        "digits",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=10,
        classes=tuple(str(d) for d in range(10)),
    )
