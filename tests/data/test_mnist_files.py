"""MNIST / Fashion-MNIST: real IDX files (raw and gzip) written into tmp_path, then read back."""

import gzip
import struct

import numpy as np
import pytest

from mico.data import DATA_ENV, fashion_mnist, load_dataset, mnist, read_idx, read_mnist
from mico.errors import DatasetError

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_NAMES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as IDX: magic 0x000008NN then big-endian sizes, then the bytes."""
    header = struct.pack(">I", 0x0800 | array.ndim)
    header += b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_mnist(folder, n_train=12, n_test=5, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        data = idx_bytes(array)
        if gz:
            with gzip.open(folder / f"{name}.gz", "wb") as handle:
                handle.write(data)
        else:
            (folder / name).write_bytes(data)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_round_trips_exactly(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    split = read_mnist(tmp_path)
    assert split.x_train.shape == (12, 1, 28, 28) and split.x_test.shape == (5, 1, 28, 28)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    assert split.x_train.min() >= 0.0 and split.x_train.max() <= 1.0
    np.testing.assert_array_equal(
        np.round(split.x_train[:, 0] * 255).astype(np.uint8), arrays["train-images-idx3-ubyte"]
    )
    np.testing.assert_array_equal(split.y_train, arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(split.y_test, arrays["t10k-labels-idx1-ubyte"])
    assert split.num_classes == 10


def test_torchvision_layouts_are_searched(tmp_path):
    mnist_arrays = write_mnist(tmp_path / "MNIST" / "raw", seed=1)
    fashion_arrays = write_mnist(tmp_path / "FashionMNIST" / "raw", gz=True, seed=2)
    digits = load_dataset("mnist", root=tmp_path)
    clothes = load_dataset("fashion_mnist", root=tmp_path)
    np.testing.assert_array_equal(digits.y_train, mnist_arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(clothes.y_train, fashion_arrays["train-labels-idx1-ubyte"])
    assert clothes.classes[9] == "Ankle boot"


def test_mnist_root_from_environment(tmp_path, monkeypatch):
    write_mnist(tmp_path)
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert read_mnist().x_train.shape == (12, 1, 28, 28)


def test_resize_and_normalize(tmp_path):
    write_mnist(tmp_path)
    small = read_mnist(tmp_path, resize=14)
    assert small.x_train.shape == (12, 1, 14, 14) and small.x_train.dtype == np.float32
    assert small.x_train.min() >= 0.0 and small.x_train.max() <= 1.0
    normed = read_mnist(tmp_path, normalize=True)
    plain = read_mnist(tmp_path)
    np.testing.assert_allclose(normed.x_test, (plain.x_test - 0.1307) / 0.3081, rtol=1e-5)


def test_mnist_loaders_batch_shapes(tmp_path):
    write_mnist(tmp_path, n_train=20)
    train, test = mnist(batch_size=8, root=tmp_path, resize=32)
    x, y = next(iter(train))
    assert tuple(x.shape) == (8, 1, 32, 32) and tuple(y.shape) == (8,)
    assert sum(len(y) for _, y in test) == 5
    x, _ = next(iter(fashion_mnist(batch_size=4, root=tmp_path)[1]))
    assert tuple(x.shape) == (4, 1, 28, 28)


def test_missing_folder_lists_expected_layout(tmp_path):
    with pytest.raises(DatasetError) as info:
        read_mnist(tmp_path / "nowhere")
    message = str(info.value)
    for name in (*NAMES, *TEST_NAMES):
        assert name in message
    assert str(tmp_path / "nowhere" / "MNIST" / "raw") in message
    assert "MICO_DATA" in message


def test_partial_folder_names_the_missing_file(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetError, match=r"missing .*t10k-labels-idx1-ubyte"):
        read_mnist(tmp_path)


def test_truncated_file_is_named(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte.*truncated"):
        read_mnist(tmp_path)


def test_wrong_magic_number_is_named(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-labels-idx1-ubyte"
    data = bytearray(path.read_bytes())
    data[3] = 3  # claims three dimensions: an image file in the labels' place
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte.*0x00000803.*0x00000801"):
        read_mnist(tmp_path)
    data[0] = 0x1F
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte.*bad IDX magic"):
        read_mnist(tmp_path)


def test_corrupt_gzip_is_named(tmp_path):
    write_mnist(tmp_path, gz=True)
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08not really gzip")
    with pytest.raises(DatasetError, match=r"t10k-images-idx3-ubyte\.gz"):
        read_mnist(tmp_path)


def test_label_count_must_match_images(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte.*4 labels for the 5 images"):
        read_mnist(tmp_path)


def test_read_idx_other_types(tmp_path):
    values = (np.arange(6).reshape(2, 3) - 3).astype(">i4")
    path = tmp_path / "ints.idx"
    path.write_bytes(struct.pack(">I", 0x0C02) + struct.pack(">II", 2, 3) + values.tobytes())
    out = read_idx(path, ndim=2)
    assert out.dtype == np.int32 and out.dtype.isnative
    np.testing.assert_array_equal(out, values)
