"""Hostile IDX / MNIST files: forged headers, wrong image sizes, truncation, gzip lies."""

from __future__ import annotations

import gzip
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from mico.data import read_idx, read_mnist
from mico.errors import DatasetError


def idx_bytes(array: np.ndarray) -> bytes:
    """A uint8 array as IDX: magic 0x000008NN, big-endian sizes, then the bytes."""
    header = struct.pack(">I", 0x0800 | array.ndim)
    return header + b"".join(struct.pack(">I", n) for n in array.shape) + array.tobytes()


def write_mnist(folder: Path) -> None:
    """Four small valid MNIST files (12 train, 5 test images of 28x28)."""
    for prefix, n in (("train", 12), ("t10k", 5)):
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
            idx_bytes(np.zeros((n, 28, 28), np.uint8))
        )
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(n, np.uint8)))


def test_dims_whose_product_wraps_int64_are_refused_before_allocating(tmp_path: Path) -> None:
    # 2**32-1 cubed wraps int64; numpy's product used to match a tiny file by accident
    path = tmp_path / "forged"
    path.write_bytes(struct.pack(">IIII", 0x0803, 2**32 - 1, 2**32 - 1, 2**32 - 1) + b"\0" * 9)
    start = time.monotonic()
    with pytest.raises(DatasetError, match=r"truncated: header declares shape .* but the file"):
        read_idx(path, ndim=3)
    assert time.monotonic() - start < 2


def test_product_that_wraps_to_the_file_size_is_still_refused(tmp_path: Path) -> None:
    # 2**32 * 2**32 * 1 == 2**64 wraps to 0 in int64: an empty data section would "match"
    path = tmp_path / "wrap"
    path.write_bytes(struct.pack(">IIII", 0x0803, 2**31, 2**31, 4))
    with pytest.raises(DatasetError, match=r"declares shape \(2147483648, 2147483648, 4\)"):
        read_idx(path, ndim=3)


def test_gzip_declaring_more_than_deflate_can_hold(tmp_path: Path) -> None:
    path = tmp_path / "big.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(struct.pack(">IIII", 0x0803, 60000, 2800, 2800))
    with pytest.raises(DatasetError, match="at most"):
        read_idx(path, ndim=3)


def test_trailing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "trail"
    path.write_bytes(idx_bytes(np.zeros((2, 3), np.uint8)) + b"x")
    with pytest.raises(DatasetError, match="has trailing bytes"):
        read_idx(path, ndim=2)


def test_truncated_header_and_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "short"
    path.write_bytes(struct.pack(">II", 0x0803, 5))
    with pytest.raises(DatasetError, match="truncated IDX header: 8 bytes, need 16"):
        read_idx(path)
    path.write_bytes(b"")
    with pytest.raises(DatasetError, match="only 0 bytes"):
        read_idx(path)


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(DatasetError, match="bad IDX magic number 0x89504E47"):
        read_idx(path)


def test_round_trip_still_exact(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "ok"
    path.write_bytes(idx_bytes(array))
    np.testing.assert_array_equal(read_idx(path, ndim=3), array)


def test_images_of_another_size_are_not_mnist(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((12, 7, 9), np.uint8)))
    with pytest.raises(DatasetError) as info:
        read_mnist(tmp_path)
    message = str(info.value)
    assert "train-images-idx3-ubyte" in message
    assert "images are 7x9 but MNIST images are 28x28" in message


def test_not_found_is_one_line_naming_folder_and_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        read_mnist(tmp_path / "nowhere")
    message = str(info.value)
    assert "\n" not in message
    assert f"no MNIST files in {tmp_path / 'nowhere'}" in message
    assert "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte" in message


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "0"])
def test_load_dataset_refuses_a_bad_seed(seed: object) -> None:
    from mico.data import load_dataset

    with pytest.raises(DatasetError, match="is not a whole number from 0 to 4294967295"):
        load_dataset("digits", seed=seed)


def test_overlong_root_is_a_dataset_error() -> None:
    from mico.data import read_cifar10

    with pytest.raises(DatasetError, match="MNIST data not found"):
        read_mnist("r" * 300)
    with pytest.raises(DatasetError, match="CIFAR-10 data not found"):
        read_cifar10("r" * 300)
