"""UCI-HAR (Human Activity Recognition with smartphones) read from the unzipped official folder.

Two views of the same recordings: the 561 engineered features per 2.56 s window (for MLPs),
or the raw inertial signals, 9 channels x 128 samples (for Conv1d models).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from mico.data.paths import corrupt, data_root, find_dir
from mico.data.split import DatasetSplit

HAR_DIR = "UCI HAR Dataset"
NUM_FEATURES = 561
SIGNAL_LENGTH = 128
SIGNALS = (
    "body_acc_x",
    "body_acc_y",
    "body_acc_z",
    "body_gyro_x",
    "body_gyro_y",
    "body_gyro_z",
    "total_acc_x",
    "total_acc_y",
    "total_acc_z",
)
ACTIVITIES = (
    "WALKING",
    "WALKING_UPSTAIRS",
    "WALKING_DOWNSTAIRS",
    "SITTING",
    "STANDING",
    "LAYING",
)
STD_EPS = 1e-6  # keeps constant features finite when standardizing


def har_layout(signals: bool) -> list[str]:
    """The files the reader needs, relative to the ``UCI HAR Dataset`` folder."""
    if signals:
        return [
            f"{part}/Inertial Signals/{s}_{part}.txt" for part in ("train", "test") for s in SIGNALS
        ] + [f"{part}/y_{part}.txt" for part in ("train", "test")]
    return [f"{part}/{f}_{part}.txt" for part in ("train", "test") for f in ("X", "y")]


def read_ucihar(
    root: str | os.PathLike[str] | None = None,
    signals: bool = False,
    standardize: bool = False,
) -> DatasetSplit:
    """UCI-HAR: 7352 train / 2947 test windows, labels 1..6 in the files mapped to 0..5.

    Inputs are float32 ``(N, 561)`` features, or ``(N, 9, 128)`` inertial signals with
    ``signals=True`` (channel order as in ``SIGNALS``). ``standardize`` rescales every feature
    (or channel) with the training mean and std, as the original MiCo loader did.
    """
    base = data_root(root)
    required = har_layout(signals)
    layout = [f"<root>/{HAR_DIR}/{entry}" for entry in required]
    layout.append("(or the train/ and test/ folders directly in <root>)")
    folder = find_dir("UCI-HAR", [base / HAR_DIR, base], required, layout)
    x_train, y_train = _part(folder, "train", signals)
    x_test, y_test = _part(folder, "test", signals)
    stats = None
    if standardize:
        axes = (0,) if not signals else (0, 2)
        mean = x_train.mean(axis=axes, keepdims=True)
        std = x_train.std(axis=axes, keepdims=True) + STD_EPS
        x_train = ((x_train - mean) / std).astype(np.float32)
        x_test = ((x_test - mean) / std).astype(np.float32)
        stats = (mean.squeeze(), std.squeeze())
    return DatasetSplit(
        "ucihar",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=len(ACTIVITIES),
        classes=ACTIVITIES,
        metadata={"folder": str(folder), "signals": signals, "standardization": stats},
    )


def _part(folder: Path, part: str, signals: bool) -> tuple[np.ndarray, np.ndarray]:
    labels = _table(folder / part / f"y_{part}.txt", columns=1).reshape(-1)
    if labels.size and (
        np.any(labels != np.round(labels)) or labels.min() < 1 or labels.max() > len(ACTIVITIES)
    ):
        raise corrupt(folder / part / f"y_{part}.txt", "labels must be integers 1..6")
    y = labels.astype(np.int64) - 1
    if signals:
        channels = [
            _table(folder / part / "Inertial Signals" / f"{s}_{part}.txt", SIGNAL_LENGTH)
            for s in SIGNALS
        ]
        x = np.stack(channels, axis=1)
        source = folder / part / "Inertial Signals" / f"{SIGNALS[0]}_{part}.txt"
    else:
        x = _table(folder / part / f"X_{part}.txt", NUM_FEATURES)
        source = folder / part / f"X_{part}.txt"
    if len(x) != len(y):
        raise corrupt(source, f"{len(x)} rows but y_{part}.txt holds {len(y)} labels")
    return x, y


def _table(path: Path, columns: int) -> np.ndarray:
    """A whitespace-separated numeric table with ``columns`` columns, as float32 (rows, columns)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns on empty files; checked below
            table = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except (ValueError, OSError) as error:
        raise corrupt(path, f"not a whitespace-separated table of numbers ({error})") from error
    if table.size == 0:
        raise corrupt(path, "the file is empty")
    if table.shape[1] != columns:
        raise corrupt(path, f"rows have {table.shape[1]} values, expected {columns}")
    if not np.all(np.isfinite(table)):
        raise corrupt(path, "holds non-finite values (nan or inf)")
    return table.astype(np.float32)
