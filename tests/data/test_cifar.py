"""CIFAR-10/100: pickled batches with the real (bytes) keys written into tmp_path, read back."""

import os
import pickle
import struct

import numpy as np
import pytest

from mico.data import cifar10, cifar100, load_dataset, read_cifar10, read_cifar100
from mico.errors import DatasetError

C10 = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"]


def dump(path, obj):
    with open(path, "wb") as handle:
        pickle.dump(obj, handle, protocol=2)  # the official files are Python 2 pickles


def py2_pickle(obj) -> bytes:
    """Protocol-2 opcodes as Python 2 with numpy 1 wrote the official files (str = bytes)."""

    def text(b: bytes) -> bytes:
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b

    def integer(n: int) -> bytes:
        return b"K" + bytes([n]) if 0 <= n < 256 else b"J" + struct.pack("<i", n)

    def value(v) -> bytes:
        if isinstance(v, bytes):
            return text(v)
        if isinstance(v, int):
            return integer(v)
        if isinstance(v, list):
            return b"](" + b"".join(value(x) for x in v) + b"e"
        if isinstance(v, dict):
            return b"}(" + b"".join(value(k) + value(x) for k, x in v.items()) + b"u"
        assert isinstance(v, np.ndarray) and v.dtype == np.uint8
        dtype = b"cnumpy\ndtype\n" + text(b"u1") + integer(0) + integer(1) + b"\x87R"
        dtype += b"(" + integer(3) + text(b"|") + b"NNN" + integer(-1) + integer(-1) + integer(0)
        dtype += b"tb"
        shape = b"(" + b"".join(integer(n) for n in v.shape) + b"t"
        return (
            b"cnumpy.core.multiarray\n_reconstruct\n"
            + b"cnumpy\nndarray\n" + integer(0) + b"\x85" + text(b"b") + b"\x87R"
            + b"(" + integer(1) + shape + dtype + b"\x89" + text(v.tobytes()) + b"tb"
        )  # fmt: skip

    return b"\x80\x02" + value(obj) + b"."


def write_cifar10(root, per_batch=3, n_test=4, seed=0):
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = []
    for name in [*C10, "test_batch"]:
        count = n_test if name == "test_batch" else per_batch
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, count)],
            b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            b"filenames": [f"img{i}.png".encode() for i in range(count)],
        }
        dump(folder / name, batch)
        batches.append(batch)
    names = [n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer")]
    names += [n.encode() for n in ("dog", "frog", "horse", "ship", "truck")]
    dump(folder / "batches.meta", {b"label_names": names, b"num_cases_per_batch": per_batch})
    return batches


def write_cifar100(root, n_train=6, n_test=3, seed=0):
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = {}
    for name, count in (("train", n_train), ("test", n_test)):
        out[name] = {
            b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            b"fine_labels": [int(v) for v in rng.integers(0, 100, count)],
            b"coarse_labels": [int(v) for v in rng.integers(0, 20, count)],
        }
        dump(folder / name, out[name])
    meta = {
        b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
    }
    dump(folder / "meta", meta)
    return out


def test_cifar10_round_trips_exactly(tmp_path):
    batches = write_cifar10(tmp_path)
    split = read_cifar10(tmp_path)
    assert split.x_train.shape == (15, 3, 32, 32) and split.x_test.shape == (4, 3, 32, 32)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    raw = np.concatenate([b[b"data"] for b in batches[:5]])
    np.testing.assert_array_equal(
        np.round(split.x_train * 255).astype(np.uint8).reshape(15, -1), raw
    )
    # channel-major: the first 1024 bytes of a row are the red plane
    np.testing.assert_array_equal(
        np.round(split.x_test[0, 0] * 255).astype(np.uint8).ravel(), batches[5][b"data"][0, :1024]
    )
    labels = [v for b in batches[:5] for v in b[b"labels"]]
    np.testing.assert_array_equal(split.y_train, labels)
    np.testing.assert_array_equal(split.y_test, batches[5][b"labels"])
    assert split.num_classes == 10 and split.classes[0] == "airplane"


def test_official_python2_pickles_are_read(tmp_path):
    batches = write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    for name, batch in zip([*C10, "test_batch"], batches, strict=True):
        (folder / name).write_bytes(py2_pickle(batch))
    meta = pickle.loads((folder / "batches.meta").read_bytes())
    (folder / "batches.meta").write_bytes(py2_pickle(meta))
    split = read_cifar10(tmp_path)
    np.testing.assert_array_equal(
        np.round(split.x_test * 255).astype(np.uint8).reshape(4, -1), batches[5][b"data"]
    )
    np.testing.assert_array_equal(split.y_train[:3], batches[0][b"labels"])
    assert split.classes[-1] == "truck"


def test_cifar10_files_directly_in_root_and_str_keys(tmp_path):
    write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    batch = pickle.loads((folder / "test_batch").read_bytes())
    dump(folder / "test_batch", {k.decode(): v for k, v in batch.items()})  # torchvision-style
    for name in os.listdir(folder):
        os.replace(folder / name, tmp_path / name)
    split = load_dataset("cifar10", root=tmp_path)
    np.testing.assert_array_equal(split.y_test, batch[b"labels"])


def test_cifar100_fine_and_coarse(tmp_path):
    parts = write_cifar100(tmp_path)
    fine = read_cifar100(tmp_path)
    assert fine.num_classes == 100 and fine.x_train.shape == (6, 3, 32, 32)
    np.testing.assert_array_equal(fine.y_train, parts["train"][b"fine_labels"])
    np.testing.assert_array_equal(
        np.round(fine.x_test * 255).astype(np.uint8).reshape(3, -1), parts["test"][b"data"]
    )
    coarse = read_cifar100(tmp_path, label_mode="coarse")
    assert coarse.num_classes == 20 and coarse.classes[3] == "coarse3"
    np.testing.assert_array_equal(coarse.y_test, parts["test"][b"coarse_labels"])
    with pytest.raises(DatasetError, match="label_mode"):
        read_cifar100(tmp_path, label_mode="medium")


def test_normalize_and_resize(tmp_path):
    write_cifar10(tmp_path)
    plain = read_cifar10(tmp_path)
    normed = read_cifar10(tmp_path, normalize=True)
    mean = np.array([0.4914, 0.4822, 0.4465], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.2470, 0.2435, 0.2616], np.float32).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(normed.x_train, (plain.x_train - mean) / std, rtol=1e-5, atol=1e-6)
    small = read_cifar10(tmp_path, resize=16)
    assert small.x_test.shape == (4, 3, 16, 16)


def test_cifar_loaders(tmp_path):
    write_cifar10(tmp_path / "a")
    write_cifar100(tmp_path / "b")
    train, _test = cifar10(batch_size=4, root=tmp_path / "a")
    x, y = next(iter(train))
    assert tuple(x.shape) == (4, 3, 32, 32) and tuple(y.shape) == (4,)
    x, _ = next(iter(cifar100(batch_size=2, root=tmp_path / "b", resize=24)[1]))
    assert tuple(x.shape) == (2, 3, 24, 24)


def test_missing_folder_lists_expected_layout(tmp_path):
    with pytest.raises(DatasetError) as info:
        read_cifar10(tmp_path)
    message = str(info.value)
    for name in [*C10, "test_batch", "batches.meta", "cifar-10-batches-py"]:
        assert name in message
    with pytest.raises(DatasetError, match=r"(?s)cifar-100-python/train.*cifar-100-python/meta"):
        read_cifar100(tmp_path)


def test_missing_batch_is_named(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DatasetError, match=r"missing .*cifar-10-batches-py/data_batch_4"):
        read_cifar10(tmp_path)


def test_bad_pickle_is_named(tmp_path):
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(path.read_bytes()[:200])  # truncated
    with pytest.raises(DatasetError, match=r"data_batch_2.*not a CIFAR python pickle"):
        read_cifar10(tmp_path)


def test_pickle_running_code_is_refused(tmp_path):
    write_cifar10(tmp_path)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    dump(tmp_path / "cifar-10-batches-py" / "test_batch", {b"data": Evil()})
    with pytest.raises(DatasetError, match=r"test_batch.*refusing to load"):
        read_cifar10(tmp_path)


def test_wrong_data_shape_is_named(tmp_path):
    write_cifar10(tmp_path)
    bad = {b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}
    dump(tmp_path / "cifar-10-batches-py" / "data_batch_1", bad)
    with pytest.raises(DatasetError, match=r"data_batch_1.*uint8 \(N, 3072\)"):
        read_cifar10(tmp_path)
    dump(tmp_path / "cifar-10-batches-py" / "data_batch_1", {b"data": bad[b"data"]})
    with pytest.raises(DatasetError, match=r"data_batch_1.*no 'labels' entry"):
        read_cifar10(tmp_path)
