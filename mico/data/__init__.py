"""Data sets: bundled digits (default); more loaders arrive with later issues."""

from __future__ import annotations

from collections.abc import Callable

from mico.data.digits import digits
from mico.data.split import DatasetSplit
from mico.errors import DatasetError

_DATASETS: dict[str, Callable[..., DatasetSplit]] = {"digits": digits}


def dataset_names() -> list[str]:
    return sorted(_DATASETS)


def load_dataset(name: str, seed: int = 0, **kwargs) -> DatasetSplit:
    """Load a data set by name (``digits``), split with ``seed``."""
    try:
        loader = _DATASETS[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset '{name}'; available: {', '.join(dataset_names())}"
        ) from None
    return loader(seed=seed, **kwargs)


__all__ = ["DatasetSplit", "dataset_names", "digits", "load_dataset"]
