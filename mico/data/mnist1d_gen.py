"""MNIST-1D, generated locally with the ``mnist1d`` package (never downloaded).

MNIST-1D (Greydanus 2020) draws 40-sample 1-D signals from ten digit-like templates with
random shifts, scaling, shear and noise: a small benchmark that still separates model types.
Generating the standard 5000 samples takes about a second, so nothing is cached unless the
user names a ``cache_dir``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from mico.data.paths import corrupt
from mico.data.split import DatasetSplit
from mico.errors import DatasetError

MNIST1D_SEED = 42  # the seed of the published data set
SEQ_LENGTH = 40


def mnist1d_args(seed: int = MNIST1D_SEED, num_samples: int = 5000) -> dict[str, Any]:
    """The package's default generation arguments with ``seed`` and ``num_samples`` replaced."""
    from mnist1d.data import get_dataset_args

    args = get_dataset_args(as_dict=True)
    args.update(seed=int(seed), num_samples=int(num_samples))
    args.pop("url", None)  # only used for downloading, which mico never does
    return args


def mnist1d(
    seed: int = 0,
    num_samples: int = 5000,
    cache_dir: str | os.PathLike[str] | None = None,
) -> DatasetSplit:
    """MNIST-1D as float32 ``(N, 1, 40)`` sequences, int64 labels 0..9, 80/20 train/test.

    ``num_samples`` (default 5000, as published; rounded down to a multiple of 10) sets the
    total size: smaller values generate proportionally faster. ``seed`` makes the data
    deterministic (``seed=42`` uses the package's own default arguments). The global
    ``random``/``numpy`` RNG state that ``mnist1d`` reseeds is restored afterwards. With
    ``cache_dir`` the arrays are stored there as ``.npz`` and reused on the next call with the
    same arguments.
    """
    if num_samples < 10:
        raise DatasetError(f"mnist1d needs num_samples >= 10 (one per class), got {num_samples}")
    args = mnist1d_args(seed, num_samples)
    cache = _cache_path(cache_dir, args)
    if cache is not None and cache.exists():
        arrays = _load_cache(cache)
    else:
        arrays = _generate(args)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, **arrays)
    return DatasetSplit(
        "mnist1d",
        arrays["x_train"],
        arrays["y_train"],
        arrays["x_test"],
        arrays["y_test"],
        num_classes=10,
        classes=tuple(str(d) for d in range(10)),
        metadata={"args": args},
    )


def _generate(args: dict[str, Any]) -> dict[str, np.ndarray]:
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        data = make_dataset(ObjectView(dict(args)))
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {
        "x_train": data["x"].astype(np.float32)[:, None, :],
        "y_train": data["y"].astype(np.int64),
        "x_test": data["x_test"].astype(np.float32)[:, None, :],
        "y_test": data["y_test"].astype(np.int64),
    }


def _cache_path(cache_dir: str | os.PathLike[str] | None, args: dict[str, Any]) -> Path | None:
    if cache_dir is None:
        return None
    key = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / f"mnist1d-{key}.npz"


def _load_cache(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    except (OSError, ValueError, KeyError) as error:
        raise corrupt(path, f"bad mnist1d cache ({error}); delete it to regenerate") from error
    if arrays["x_train"].ndim != 3 or arrays["x_train"].shape[1:] != (1, SEQ_LENGTH):
        raise corrupt(path, f"cached inputs have shape {arrays['x_train'].shape}")
    return arrays
