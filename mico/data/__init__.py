"""Data sets: generated offline sets, readers of standard on-disk formats, MiCo-style loaders.

Three layers, all returning or built on :class:`DatasetSplit` (train/test arrays in memory):

* generated or bundled, always offline: :func:`digits`, :func:`mnist1d`, :func:`synthetic`,
  :func:`synthetic_tokens`;
* readers of files the user placed under a data root (``root=``, else ``$MICO_DATA``, else
  ``./data``; nothing is ever downloaded): ``read_mnist``, ``read_fashion_mnist``,
  ``read_cifar10``, ``read_cifar100``, ``read_ucihar``, ``read_speechcommands``,
  ``read_tinystories``;
* the MiCo loader API returning ``(train_loader, test_loader)``: :func:`mnist`,
  :func:`cifar10`, ... and the offline :func:`digits_loaders`, :func:`mnist1d_loaders`.

:func:`load_dataset` reaches every data set by name. See ``docs/datasets.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral

from mico.data.bpe import ByteBPETokenizer
from mico.data.cifar import read_cifar10, read_cifar100
from mico.data.digits import digits
from mico.data.har import read_ucihar
from mico.data.idx import read_idx
from mico.data.loaders import (
    cifar10,
    cifar100,
    digits_loaders,
    fashion_mnist,
    mnist,
    mnist1d_loaders,
    speechcommands,
    tinystories,
    ucihar,
)
from mico.data.mfcc import mel_filterbank, mfcc
from mico.data.mnist1d_gen import mnist1d
from mico.data.mnist_files import read_fashion_mnist, read_mnist
from mico.data.paths import DATA_ENV, data_root
from mico.data.speech import KWS_WORDS, read_speechcommands, speech_features
from mico.data.split import DatasetSplit
from mico.data.stories import iter_stories, read_tinystories, token_windows
from mico.data.synth import synthetic, synthetic_tokens
from mico.data.wav import read_wav
from mico.errors import DatasetError


def _seedless(reader: Callable[..., DatasetSplit]) -> Callable[..., DatasetSplit]:
    """Adapt a reader whose data does not depend on a seed to the ``load_dataset`` call."""

    def load(seed: int = 0, **kwargs) -> DatasetSplit:
        del seed  # the files fix the split; loaders shuffle with their own seed
        return reader(**kwargs)

    load.__doc__ = reader.__doc__
    return load


_DATASETS: dict[str, Callable[..., DatasetSplit]] = {
    "digits": digits,
    "mnist1d": mnist1d,
    "synthetic": synthetic,
    "synthetic_tokens": synthetic_tokens,
    "mnist": _seedless(read_mnist),
    "fashion_mnist": _seedless(read_fashion_mnist),
    "cifar10": _seedless(read_cifar10),
    "cifar100": _seedless(read_cifar100),
    "ucihar": _seedless(read_ucihar),
    "speechcommands": read_speechcommands,
    "tinystories": _seedless(read_tinystories),
}


def dataset_names() -> list[str]:
    """Names accepted by :func:`load_dataset`."""
    return sorted(_DATASETS)


MAX_SEED = 2**32 - 1  # numpy and scikit-learn take seeds in [0, 2**32)


def load_dataset(name: str, seed: int = 0, **kwargs) -> DatasetSplit:
    """Load a data set by name (see :func:`dataset_names`); ``kwargs`` go to its reader.

    ``seed`` drives the split of ``digits``, the generation of ``mnist1d``/``synthetic*`` and
    the subset of ``speechcommands(limit=...)``; the on-disk sets have fixed splits.
    """
    if isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed <= MAX_SEED:
        raise DatasetError(
            f"seed {seed!r:.40} is not a whole number from 0 to {MAX_SEED}; pick one"
        )
    try:
        loader = _DATASETS[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset '{name}'; available: {', '.join(dataset_names())}"
        ) from None
    try:
        return loader(seed=seed, **kwargs)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        raise DatasetError(f"dataset '{name}': {error}") from None


__all__ = [
    "DATA_ENV",
    "KWS_WORDS",
    "ByteBPETokenizer",
    "DatasetSplit",
    "cifar10",
    "cifar100",
    "data_root",
    "dataset_names",
    "digits",
    "digits_loaders",
    "fashion_mnist",
    "iter_stories",
    "load_dataset",
    "mel_filterbank",
    "mfcc",
    "mnist",
    "mnist1d",
    "mnist1d_loaders",
    "read_cifar10",
    "read_cifar100",
    "read_fashion_mnist",
    "read_idx",
    "read_mnist",
    "read_speechcommands",
    "read_tinystories",
    "read_ucihar",
    "read_wav",
    "speech_features",
    "speechcommands",
    "synthetic",
    "synthetic_tokens",
    "tinystories",
    "token_windows",
    "ucihar",
]
