"""CIFAR-10 and CIFAR-100 read from the official "python version" pickled batches.

Each batch is a pickled dict (bytes keys in the official Python 2 files) with ``data``, a
uint8 ``(N, 3072)`` array of row-major RGB 32x32 images, and the labels (``labels`` for
CIFAR-10, ``fine_labels`` / ``coarse_labels`` for CIFAR-100). Unpickling is restricted to
numpy arrays and plain containers, so a tampered file cannot run code.
"""

from __future__ import annotations

import codecs
import importlib
import math
import os
import pickle
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np

from mico.data.paths import corrupt, data_root, find_dir
from mico.data.split import DatasetSplit
from mico.data.transforms import image_split
from mico.errors import DatasetError, brief

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")
CIFAR100_DIR = "cifar-100-python"
CIFAR100_FILES = ("train", "test", "meta")
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
IMAGE_BYTES = 3 * 32 * 32
PIXEL_MAX = 255.0


_NUMPY_INTERNALS = {  # (module, name) in the pickle -> (submodule, name), numpy 1 and 2 spellings
    (f"numpy.{core}.{sub}", name): (sub, name)
    for core in ("core", "_core")
    for sub, name in (
        ("multiarray", "_reconstruct"),
        ("multiarray", "scalar"),
        ("numeric", "_frombuffer"),
    )
}


def _numpy_internal(submodule: str, name: str) -> Any:
    try:
        module = importlib.import_module(f"numpy._core.{submodule}")
    except ImportError:  # numpy < 2
        module = importlib.import_module(f"numpy.core.{submodule}")
    return getattr(module, name)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays: anything else in the file is refused.

    An array may not be larger than ``limit`` bytes (the file's size: a real batch carries its
    pixels), so a forged shape is refused before numpy allocates it.
    """

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        super().__init__(handle, encoding="latin1")
        self.limit = limit
        self.ndarray = self._bounded(np.ndarray, shape_at=0, dtype_at=1)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("numpy", "ndarray"):
            return self.ndarray
        if (module, name) == ("numpy", "dtype"):
            return np.dtype
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode  # bytes in protocol-2 pickles made by Python 3
        if (module, name) in _NUMPY_INTERNALS:
            found = _numpy_internal(*_NUMPY_INTERNALS[(module, name)])
            if name == "_reconstruct":  # _reconstruct(subtype, shape, dtype)
                return self._bounded(found, shape_at=1, dtype_at=2)
            return found
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays)")

    def _bounded(self, build: Any, shape_at: int, dtype_at: int) -> Any:
        """``build`` guarded: the array it would allocate must fit in ``self.limit`` bytes."""

        def guarded(*args: Any, **kwargs: Any) -> Any:
            shape = args[shape_at] if len(args) > shape_at else kwargs.get("shape", ())
            dtype = args[dtype_at] if len(args) > dtype_at else kwargs.get("dtype", float)
            dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
            if not all(isinstance(d, int | np.integer) and d >= 0 for d in dims):
                raise pickle.UnpicklingError(f"array shape {brief(shape)} is not a shape")
            size = math.prod(int(d) for d in dims) * max(np.dtype(dtype).itemsize, 1)
            if size > self.limit:
                raise pickle.UnpicklingError(
                    f"it declares an array of {size} bytes, more than the file's {self.limit}"
                )
            if args and args[0] is self.ndarray:  # _reconstruct's subtype argument
                args = (np.ndarray, *args[1:])
            return build(*args, **kwargs)

        return guarded


def load_batch(path: Path) -> dict[str, Any]:
    """One pickled CIFAR batch as a dict with str keys; DatasetError naming the file if bad."""
    try:
        with open(path, "rb") as handle:
            batch = _ArrayUnpickler(handle, limit=os.fstat(handle.fileno()).st_size).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OverflowError,
        MemoryError,
        RecursionError,
    ) as error:
        detail = " ".join(str(error).split())
        detail = detail if len(detail) <= 160 else detail[:157] + "..."
        problem = f"not a CIFAR python pickle ({type(error).__name__}: {detail})"
        raise corrupt(path, problem) from error
    except OSError as error:
        raise corrupt(path, f"cannot read ({error})") from error
    if not isinstance(batch, dict):
        raise corrupt(path, f"expected a pickled dict, found {type(batch).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in batch.items()}


def read_cifar10(
    root: str | os.PathLike[str] | None = None,
    resize: int | tuple[int, int] | None = None,
    normalize: bool = False,
) -> DatasetSplit:
    """CIFAR-10 as float32 ``(N, 3, 32, 32)`` in [0, 1] (50000 train / 10000 test), 10 classes.

    ``normalize`` standardizes each channel with the CIFAR-10 training mean and std.
    """
    base = data_root(root)
    folder = find_dir(
        "CIFAR-10",
        [base / CIFAR10_DIR, base],
        CIFAR10_FILES,
        [f"<root>/{CIFAR10_DIR}/{f}" for f in CIFAR10_FILES]
        + ["(or the same files directly in <root>)"],
    )
    train = [_images_labels(folder / f"data_batch_{i}", "labels") for i in range(1, 6)]
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    x_test, y_test = _images_labels(folder / "test_batch", "labels")
    classes = _names(folder / "batches.meta", "label_names", 10)
    stats = CIFAR10_STATS if normalize else None
    return _finish("cifar10", x_train, y_train, x_test, y_test, classes, resize, stats, folder)


def read_cifar100(
    root: str | os.PathLike[str] | None = None,
    resize: int | tuple[int, int] | None = None,
    normalize: bool = False,
    label_mode: Literal["fine", "coarse"] = "fine",
) -> DatasetSplit:
    """CIFAR-100 as float32 ``(N, 3, 32, 32)``: 100 fine labels, or 20 with ``'coarse'``."""
    if label_mode not in ("fine", "coarse"):
        raise DatasetError(f"label_mode must be 'fine' or 'coarse', got {label_mode!r}")
    base = data_root(root)
    folder = find_dir(
        "CIFAR-100",
        [base / CIFAR100_DIR, base],
        CIFAR100_FILES,
        [f"<root>/{CIFAR100_DIR}/{f}" for f in CIFAR100_FILES]
        + ["(or the same files directly in <root>)"],
    )
    key = f"{label_mode}_labels"
    count = 100 if label_mode == "fine" else 20
    x_train, y_train = _images_labels(folder / "train", key)
    x_test, y_test = _images_labels(folder / "test", key)
    classes = _names(folder / "meta", f"{label_mode}_label_names", count)
    stats = CIFAR100_STATS if normalize else None
    name = "cifar100" if label_mode == "fine" else "cifar100_coarse"
    return _finish(name, x_train, y_train, x_test, y_test, classes, resize, stats, folder)


def _images_labels(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    batch = load_batch(path)
    for key in ("data", label_key):
        if key not in batch:
            raise corrupt(path, f"no '{key}' entry (keys: {', '.join(sorted(batch))})")
    try:  # a list in place of an array may be ragged, nested without end, or hold anything
        data = np.asarray(batch["data"])
        labels = np.asarray(batch[label_key])
    except (ValueError, TypeError, OverflowError, RecursionError) as error:
        problem = f"'data' or '{label_key}' is not an array ({type(error).__name__})"
        raise corrupt(path, problem) from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
        raise corrupt(
            path, f"'data' must be uint8 (N, {IMAGE_BYTES}), got {data.dtype} {data.shape}"
        )
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise corrupt(
            path, f"'{label_key}' must hold {len(data)} integers, got {labels.dtype} {labels.shape}"
        )
    images = data.reshape(-1, 3, 32, 32).astype(np.float32) / PIXEL_MAX
    return images, labels.astype(np.int64)


def _names(path: Path, key: str, count: int) -> tuple[str, ...]:
    meta = load_batch(path)
    if key not in meta:
        raise corrupt(path, f"no '{key}' entry (keys: {', '.join(sorted(meta))})")
    if not isinstance(meta[key], list | tuple):
        raise corrupt(path, f"'{key}' must be a list of names, got {type(meta[key]).__name__}")
    names = tuple(n.decode("latin1") if isinstance(n, bytes) else str(n)[:200] for n in meta[key])
    if len(names) != count:
        raise corrupt(path, f"'{key}' lists {len(names)} names, expected {count}")
    return names


def _finish(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    classes: tuple[str, ...],
    resize: int | tuple[int, int] | None,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None,
    folder: Path,
) -> DatasetSplit:
    for part, labels in (("train", y_train), ("test", y_test)):
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise corrupt(
                folder,
                f"{part} labels span {labels.min()}..{labels.max()}, "
                f"expected 0..{len(classes) - 1}",
            )
    return image_split(name, (x_train, y_train), (x_test, y_test), classes, resize, stats, folder)
