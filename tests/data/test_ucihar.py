"""UCI-HAR: the official text files written into tmp_path, read back."""

import numpy as np
import pytest

from mico.data import load_dataset, read_ucihar, ucihar
from mico.data.har import SIGNALS
from mico.errors import DatasetError


def write_table(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    # the official files: fixed-width, space-separated, scientific notation
    lines = [" ".join(f"{v: .9e}" for v in row) for row in np.atleast_2d(table)]
    path.write_text("\n".join(lines) + "\n")


def write_har(root, n_train=7, n_test=3, seed=0):
    rng = np.random.default_rng(seed)
    folder = root / "UCI HAR Dataset"
    out = {}
    for part, count in (("train", n_train), ("test", n_test)):
        x = rng.uniform(-1, 1, (count, 561)).astype(np.float32)
        y = rng.integers(1, 7, count)
        signals = rng.normal(size=(count, 9, 128)).astype(np.float32)
        write_table(folder / part / f"X_{part}.txt", x)
        (folder / part / f"y_{part}.txt").write_text("".join(f"{v}\n" for v in y))
        for c, name in enumerate(SIGNALS):
            write_table(folder / part / "Inertial Signals" / f"{name}_{part}.txt", signals[:, c])
        out[part] = (x, y, signals)
    return out


def test_features_round_trip_and_labels_shift(tmp_path):
    parts = write_har(tmp_path)
    split = read_ucihar(tmp_path)
    assert split.x_train.shape == (7, 561) and split.x_test.shape == (3, 561)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    np.testing.assert_array_equal(split.x_train, parts["train"][0])
    np.testing.assert_array_equal(split.y_train, parts["train"][1] - 1)
    np.testing.assert_array_equal(split.y_test, parts["test"][1] - 1)
    assert split.num_classes == 6 and split.classes[0] == "WALKING"


def test_inertial_signals_for_conv1d(tmp_path):
    parts = write_har(tmp_path)
    split = load_dataset("ucihar", root=tmp_path / "UCI HAR Dataset", signals=True)
    assert split.x_train.shape == (7, 9, 128) and split.x_train.dtype == np.float32
    np.testing.assert_array_equal(split.x_test, parts["test"][2])  # channel order = SIGNALS


def test_standardize_uses_training_statistics(tmp_path):
    write_har(tmp_path, n_train=20)
    split = read_ucihar(tmp_path, standardize=True)
    np.testing.assert_allclose(split.x_train.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(split.x_train.std(0), 1.0, atol=1e-3)
    raw = read_ucihar(tmp_path)
    mean, std = split.metadata["standardization"]
    np.testing.assert_allclose(split.x_test, (raw.x_test - mean) / std, rtol=1e-4, atol=1e-5)


def test_ucihar_loader(tmp_path):
    write_har(tmp_path)
    train, _test = ucihar(batch_size=4, root=tmp_path)
    x, y = next(iter(train))
    assert tuple(x.shape) == (4, 561) and tuple(y.shape) == (4,)
    x, _ = next(iter(ucihar(batch_size=2, root=tmp_path, signals=True)[1]))
    assert tuple(x.shape) == (2, 9, 128)


def test_missing_folder_lists_expected_layout(tmp_path):
    with pytest.raises(DatasetError) as info:
        read_ucihar(tmp_path)
    message = str(info.value)
    for name in ("UCI HAR Dataset", "train/X_train.txt", "train/y_train.txt", "test/X_test.txt"):
        assert name in message
    with pytest.raises(DatasetError, match=r"Inertial Signals/body_acc_x_train\.txt"):
        read_ucihar(tmp_path, signals=True)


def test_missing_signal_file_is_named(tmp_path):
    write_har(tmp_path)
    (tmp_path / "UCI HAR Dataset/test/Inertial Signals/total_acc_z_test.txt").unlink()
    with pytest.raises(DatasetError, match=r"missing .*total_acc_z_test\.txt"):
        read_ucihar(tmp_path, signals=True)
    assert read_ucihar(tmp_path).x_test.shape == (3, 561)  # the features do not need it


def test_wrong_columns_and_bad_labels_are_named(tmp_path):
    write_har(tmp_path)
    folder = tmp_path / "UCI HAR Dataset"
    write_table(folder / "test" / "X_test.txt", np.zeros((3, 560)))
    with pytest.raises(DatasetError, match=r"X_test\.txt.*560 values, expected 561"):
        read_ucihar(tmp_path)
    write_har(tmp_path / "b")
    (tmp_path / "b/UCI HAR Dataset/train/y_train.txt").write_text("1\n7\n2\n3\n4\n5\n6\n")
    with pytest.raises(DatasetError, match=r"y_train\.txt.*1\.\.6"):
        read_ucihar(tmp_path / "b")
    (tmp_path / "b/UCI HAR Dataset/train/y_train.txt").write_text("1\n2\n")
    with pytest.raises(DatasetError, match=r"X_train\.txt.*7 rows but y_train\.txt holds 2"):
        read_ucihar(tmp_path / "b")
    (tmp_path / "b/UCI HAR Dataset/train/y_train.txt").write_text("walking\n")
    with pytest.raises(DatasetError, match=r"y_train\.txt.*not a whitespace-separated table"):
        read_ucihar(tmp_path / "b")
