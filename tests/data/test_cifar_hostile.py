"""Hostile CIFAR pickles: forged array sizes are refused before allocation, and no pickle
ever runs code of its own (the restricted unpickler refuses every global but numpy's)."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mico.data.cifar import load_batch, read_cifar10
from mico.errors import DatasetError

PIB = 2**50


class _Reduce:
    """Pickles as ``func(*args)``: how a hostile file asks the unpickler to call something."""

    def __init__(self, func: Any, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def _write(path: Path, obj: object) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=2))
    return path


def _refused(path: Path, *words: str) -> str:
    start = time.monotonic()
    with pytest.raises(DatasetError) as info:
        load_batch(path)
    assert time.monotonic() - start < 2
    message = str(info.value)
    assert str(path) in message and "\n" not in message and len(message) < 400, message
    for word in words:
        assert word in message, message
    return message


def test_ndarray_of_8_pib_is_refused_before_allocating(tmp_path: Path) -> None:
    path = _write(tmp_path / "b", {"data": _Reduce(np.ndarray, ((8 * PIB,), "u1"))})
    _refused(path, f"declares an array of {8 * PIB} bytes, more than the file's")


def test_reconstruct_of_8_pib_is_refused(tmp_path: Path) -> None:
    from numpy._core.multiarray import _reconstruct

    path = _write(tmp_path / "b", {"data": _Reduce(_reconstruct, (np.ndarray, (PIB, 8), b"b"))})
    _refused(path, "declares an array of")


def test_forged_shape_in_setstate(tmp_path: Path) -> None:
    array = np.zeros((2, 3072), np.uint8)
    raw = pickle.dumps({"data": array}, protocol=2)
    forged = raw.replace(b"K\x02M\x00\x0c", b"J\x00\x00\x00\x40M\x00\x0c")  # 2 rows -> 2**30
    assert forged != raw
    path = tmp_path / "b"
    path.write_bytes(forged)
    _refused(path, "not a CIFAR python pickle")


def test_non_integer_shape(tmp_path: Path) -> None:
    path = _write(tmp_path / "b", {"data": _Reduce(np.ndarray, (("x",), "u1"))})
    _refused(path, "is not a shape")


@pytest.mark.parametrize(
    "func", [os.system, eval, exec, open, getattr, __import__], ids=lambda f: f.__name__
)
def test_no_foreign_callable_runs(tmp_path: Path, func: Any) -> None:
    target = tmp_path / "pwned"
    payload = {
        os.system: (f"touch {target}",),
        eval: (f"open({str(target)!r}, 'w')",),
        exec: (f"open({str(target)!r}, 'w')",),
        open: (str(target), "w"),
        getattr: (str(target), "upper"),
        __import__: ("os",),
    }[func]
    path = _write(tmp_path / "b", {"data": _Reduce(func, payload)})
    _refused(path, "refusing to load")
    assert not target.exists()


def test_malicious_batch_through_the_reader(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    target = tmp_path / "pwned"
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]:
        _write(folder / name, {"data": _Reduce(os.system, (f"touch {target}",))})
    with pytest.raises(DatasetError, match=r"data_batch_1.*refusing to load posix.system"):
        read_cifar10(tmp_path)
    assert not target.exists()


def test_honest_batch_still_loads(tmp_path: Path) -> None:
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    path = _write(tmp_path / "b", {b"data": data, b"labels": [1, 2]})
    batch = load_batch(path)
    np.testing.assert_array_equal(batch["data"], data)
    assert batch["labels"] == [1, 2]


def _folder_with(tmp_path: Path, first: object, meta: object | None = None) -> Path:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    honest = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        _write(folder / name, first if name == "data_batch_1" else honest)
    _write(folder / "batches.meta", meta or {b"label_names": [b"x"] * 10})
    return tmp_path


def _deep_list_pickle(depth: int) -> bytes:
    """A protocol-2 pickle of ``{b'data': [[[...]]], b'labels': [0]}`` nested ``depth`` deep
    (written by hand: Python's own pickler would recurse)."""
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST... then APPEND each into the last
    return b"\x80\x02}(C\x04data" + nested + b"C\x06labels]K\x00au."


@pytest.mark.parametrize(
    ("first", "words"),
    [
        ({b"data": [[1, 2], [3]], b"labels": [0]}, "'data' or 'labels' is not an array"),
        ({b"data": ["a"] * 3072, b"labels": [0]}, "'data' must be uint8"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10**30]}, "must hold 1 integers"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": {1: 2}}, "must hold 1 integers"),
    ],
)
def test_malformed_batches(tmp_path: Path, first: object, words: str) -> None:
    with pytest.raises(DatasetError, match=r"data_batch_1") as info:
        read_cifar10(_folder_with(tmp_path, first))
    assert words in str(info.value)


def test_deeply_nested_data(tmp_path: Path) -> None:
    root = _folder_with(tmp_path, {})
    (root / "cifar-10-batches-py" / "data_batch_1").write_bytes(_deep_list_pickle(100_000))
    with pytest.raises(DatasetError, match="data_batch_1: 'data' or 'labels' is not an array"):
        read_cifar10(root)


def test_label_names_not_a_list(tmp_path: Path) -> None:
    ok = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}
    with pytest.raises(DatasetError, match="'label_names' must be a list of names, got int"):
        read_cifar10(_folder_with(tmp_path, ok, {b"label_names": 5}))
