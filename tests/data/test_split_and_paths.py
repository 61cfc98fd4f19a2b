import numpy as np
import pytest
import torch

from mico.data import DATA_ENV, DatasetSplit, data_root, load_dataset
from mico.errors import DatasetError


def _split(n_train=10, n_test=4):
    x = np.arange(n_train * 2, dtype=np.float32).reshape(n_train, 2)
    y = np.arange(n_train, dtype=np.int64) % 2
    return DatasetSplit("toy", x, y, x[:n_test], y[:n_test], num_classes=2)


def test_loaders_unshuffled_keep_order_and_num_workers_is_accepted():
    train, test = _split().loaders(batch_size=3, shuffle=False, num_workers=0)
    xs = torch.cat([x for x, _ in train]).numpy()
    np.testing.assert_array_equal(xs, _split().x_train)
    assert [len(y) for _, y in test] == [3, 1]


def test_shuffled_loader_is_seeded():
    def order(seed):
        train, _ = _split().loaders(batch_size=10, seed=seed)
        return next(iter(train))[1].tolist(), next(iter(train))[0][:, 0].tolist()

    assert order(3) == order(3)
    assert order(3) != order(4)


def test_mismatched_lengths_are_rejected():
    x = np.zeros((5, 2), np.float32)
    with pytest.raises(DatasetError, match=r"train inputs hold 5 samples but train labels hold 4"):
        DatasetSplit("bad", x, np.zeros(4, np.int64), x, np.zeros(5, np.int64), num_classes=2)


def test_class_names_must_match_num_classes():
    x, y = np.zeros((2, 1), np.float32), np.zeros(2, np.int64)
    with pytest.raises(DatasetError, match="3 class names given for 2 classes"):
        DatasetSplit("bad", x, y, x, y, num_classes=2, classes=("a", "b", "c"))


@pytest.mark.parametrize(("kwargs", "message"), [({"batch_size": 0}, "batch_size")])
def test_bad_loader_arguments(kwargs, message):
    with pytest.raises(DatasetError, match=message):
        _split().loaders(**kwargs)


def test_data_root_order(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert str(data_root()) == "data"
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_root() == tmp_path
    assert data_root(tmp_path / "x") == tmp_path / "x"


def test_unexpected_keyword_is_a_dataset_error():
    with pytest.raises(DatasetError, match=r"dataset 'synthetic'.*colour"):
        load_dataset("synthetic", colour="red")


def test_every_registered_name_is_listed():
    from mico.data import dataset_names

    assert set(dataset_names()) >= {
        "digits", "mnist1d", "synthetic", "mnist", "fashion_mnist", "cifar10", "cifar100",
        "ucihar", "speechcommands", "tinystories",
    }  # fmt: skip
