"""Synthetic, learnable data sets generated from a seed: for tests and offline examples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mico.data.split import DatasetSplit
from mico.errors import DatasetError

NOISE_SCALE = 0.5  # noise std relative to the unit-norm spread of the class means


def synthetic(
    shape: Sequence[int] = (1, 8, 8),
    num_classes: int = 10,
    n_train: int = 256,
    n_test: int = 64,
    seed: int = 0,
    noise: float = NOISE_SCALE,
) -> DatasetSplit:
    """Gaussian classes: float32 samples of ``shape`` = class mean + ``noise`` * N(0, 1).

    Each class has a random mean pattern with values in [-1, 1], so a linear model (or any
    small network) can learn it; labels cycle through the classes so every class appears.
    The same ``seed`` always gives the same arrays.
    """
    shape = tuple(int(d) for d in shape)
    if not shape or min(shape) < 1:
        raise DatasetError(f"shape must be non-empty positive sizes, got {shape}")
    if num_classes < 2:
        raise DatasetError(f"num_classes must be at least 2, got {num_classes}")
    if n_train < 1 or n_test < 1:
        raise DatasetError(f"n_train and n_test must be positive, got {n_train} and {n_test}")
    rng = np.random.default_rng(seed)
    means = rng.uniform(-1.0, 1.0, size=(num_classes, *shape)).astype(np.float32)

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.permutation(np.arange(count) % num_classes).astype(np.int64)
        x = means[labels] + noise * rng.standard_normal((count, *shape), dtype=np.float32)
        return x.astype(np.float32), labels

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return DatasetSplit(
        "synthetic",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=num_classes,
        metadata={"means": means, "noise": noise},
    )


def synthetic_tokens(
    vocab_size: int = 64,
    seq_len: int = 32,
    n_train: int = 256,
    n_test: int = 64,
    seed: int = 0,
) -> DatasetSplit:
    """Token windows from a random sparse Markov chain: int64 inputs ``(N, T)``, next tokens.

    Every token has four likely successors, so a language model can push its loss well below
    ``log(vocab_size)``. ``y[:, t]`` is the token following ``x[:, t]`` (``x`` shifted by one).
    """
    if vocab_size < 2 or seq_len < 1 or n_train < 1 or n_test < 1:
        raise DatasetError(
            "synthetic_tokens needs vocab_size >= 2 and positive seq_len, n_train, n_test; got "
            f"vocab_size={vocab_size}, seq_len={seq_len}, n_train={n_train}, n_test={n_test}"
        )
    rng = np.random.default_rng(seed)
    branching = min(4, vocab_size)
    successors = np.stack(
        [rng.choice(vocab_size, branching, replace=False) for _ in range(vocab_size)]
    )

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        seqs = np.empty((count, seq_len + 1), dtype=np.int64)
        seqs[:, 0] = rng.integers(0, vocab_size, count)
        for t in range(1, seq_len + 1):
            pick = rng.integers(0, branching, count)
            seqs[:, t] = successors[seqs[:, t - 1], pick]
        return seqs[:, :-1].copy(), seqs[:, 1:].copy()

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return DatasetSplit(
        "synthetic_tokens",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=vocab_size,
        metadata={"successors": successors},
    )
