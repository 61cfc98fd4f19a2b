"""The MiCo-style loader API: one call gives ``(train_loader, test_loader)`` for a data set.

These mirror the functions of the original MiCo framework (``mnist(batch_size, ...)``), minus
downloading and augmentation: every function reads or generates a :class:`DatasetSplit` and
returns its loaders. The training loader is shuffled (seeded by ``seed``) unless
``shuffle=False``; the test loader keeps the file order.
"""

from __future__ import annotations

import os
from typing import Literal

from torch.utils.data import DataLoader

from mico.data.bpe import ByteBPETokenizer
from mico.data.cifar import read_cifar10, read_cifar100
from mico.data.digits import digits
from mico.data.har import read_ucihar
from mico.data.mnist1d_gen import mnist1d
from mico.data.mnist_files import read_fashion_mnist, read_mnist
from mico.data.speech import KWS_WORDS, read_speechcommands
from mico.data.stories import read_tinystories

Root = str | os.PathLike[str] | None
Loaders = tuple[DataLoader, DataLoader]
DIGITS_SIZE = 8


def digits_loaders(
    batch_size: int = 64,
    num_workers: int = 0,
    resize: int = DIGITS_SIZE,
    shuffle: bool = True,
    seed: int = 0,
) -> Loaders:
    """Offline stand-in for MNIST: scikit-learn digits, ``(B, 1, resize, resize)`` in [0, 1].

    ``resize=28`` gives MNIST-sized inputs so LeNet-style models train without downloads.
    """
    split = digits(seed=seed, resize=None if resize == DIGITS_SIZE else resize)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def mnist1d_loaders(
    batch_size: int = 64,
    num_workers: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    num_samples: int = 5000,
) -> Loaders:
    """MNIST-1D generated locally: batches ``(B, 1, 40)``, labels 0..9."""
    split = mnist1d(seed=seed, num_samples=num_samples)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def mnist(
    batch_size: int = 64,
    num_workers: int = 0,
    resize: int = 28,
    shuffle: bool = True,
    root: Root = None,
    normalize: bool = False,
    seed: int = 0,
) -> Loaders:
    """MNIST from IDX files under ``root``: batches ``(B, 1, resize, resize)``."""
    split = read_mnist(root, resize=resize, normalize=normalize)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def fashion_mnist(
    batch_size: int = 64,
    num_workers: int = 0,
    resize: int = 28,
    shuffle: bool = True,
    root: Root = None,
    normalize: bool = False,
    seed: int = 0,
) -> Loaders:
    """Fashion-MNIST from IDX files under ``root``: batches ``(B, 1, resize, resize)``."""
    split = read_fashion_mnist(root, resize=resize, normalize=normalize)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def cifar10(
    batch_size: int = 128,
    num_workers: int = 0,
    resize: int = 32,
    shuffle: bool = True,
    root: Root = None,
    normalize: bool = False,
    seed: int = 0,
) -> Loaders:
    """CIFAR-10 from the python batches under ``root``: batches ``(B, 3, resize, resize)``."""
    split = read_cifar10(root, resize=resize, normalize=normalize)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def cifar100(
    batch_size: int = 128,
    num_workers: int = 0,
    resize: int = 32,
    shuffle: bool = True,
    root: Root = None,
    normalize: bool = False,
    label_mode: Literal["fine", "coarse"] = "fine",
    seed: int = 0,
) -> Loaders:
    """CIFAR-100 (fine labels by default) under ``root``: batches ``(B, 3, resize, resize)``."""
    split = read_cifar100(root, resize=resize, normalize=normalize, label_mode=label_mode)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def ucihar(
    batch_size: int = 64,
    num_workers: int = 0,
    shuffle: bool = True,
    root: Root = None,
    signals: bool = False,
    standardize: bool = False,
    seed: int = 0,
) -> Loaders:
    """UCI-HAR under ``root``: batches ``(B, 561)`` features, or ``(B, 9, 128)`` signals."""
    split = read_ucihar(root, signals=signals, standardize=standardize)
    return split.loaders(batch_size, seed, num_workers, shuffle)


def speechcommands(
    batch_size: int = 64,
    num_workers: int = 0,
    shuffle: bool = True,
    root: Root = None,
    features: Literal["mfcc", "waveform"] = "mfcc",
    words: tuple[str, ...] | None = KWS_WORDS,
    unknown: bool = False,
    limit: int | None = None,
    seed: int = 0,
) -> Loaders:
    """Speech Commands under ``root``: ``(B, 1, 49, 10)`` MFCCs or ``(B, 1, 16000)`` waveforms."""
    split = read_speechcommands(
        root, features=features, words=words, unknown=unknown, limit=limit, seed=seed
    )
    return split.loaders(batch_size, seed, num_workers, shuffle)


def tinystories(
    batch_size: int = 32,
    seq_len: int = 128,
    root: Root = None,
    vocab_size: int = 512,
    num_workers: int = 0,
    shuffle: bool = True,
    max_stories: int | None = 20_000,
    tokenizer: ByteBPETokenizer | str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> Loaders:
    """TinyStories under ``root``: int64 batches ``(B, seq_len)`` and next-token targets."""
    split = read_tinystories(
        root, seq_len=seq_len, vocab_size=vocab_size, max_stories=max_stories, tokenizer=tokenizer
    )
    return split.loaders(batch_size, seed, num_workers, shuffle)
