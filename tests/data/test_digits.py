import numpy as np
import pytest

from mico.data import dataset_names, load_dataset
from mico.errors import DatasetError, MicoError


def test_digits_split_shapes_and_range(digits_split):
    assert digits_split.x_train.shape == (1437, 1, 8, 8)
    assert digits_split.x_test.shape == (360, 1, 8, 8)
    assert digits_split.x_train.dtype == np.float32
    assert digits_split.y_train.dtype == np.int64
    assert digits_split.x_train.min() == 0.0 and digits_split.x_train.max() == 1.0
    assert digits_split.input_shape == (1, 8, 8)
    assert digits_split.num_classes == 10


def test_digits_split_is_stratified_and_deterministic(digits_split):
    again = load_dataset("digits", seed=0)
    np.testing.assert_array_equal(again.x_test, digits_split.x_test)
    counts = np.bincount(digits_split.y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of ~180 per class
    other = load_dataset("digits", seed=1)
    assert not np.array_equal(other.x_test, digits_split.x_test)


def test_loaders_cover_every_sample(digits_split):
    train_loader, test_loader = digits_split.loaders(batch_size=100)
    assert sum(len(y) for _, y in train_loader) == 1437
    xs = np.concatenate([x.numpy() for x, _ in test_loader])
    np.testing.assert_array_equal(xs, digits_split.x_test)  # test order is kept


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(DatasetError, match=r"unknown dataset 'mnist9'.*digits") as info:
        load_dataset("mnist9")
    assert isinstance(info.value, MicoError)
    assert "digits" in dataset_names()


def test_bad_test_fraction():
    with pytest.raises(ValueError, match="test_fraction"):
        load_dataset("digits", test_fraction=1.5)
