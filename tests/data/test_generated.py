import random

import numpy as np
import pytest

from mico.data import (
    digits_loaders,
    load_dataset,
    mnist1d,
    mnist1d_loaders,
    synthetic,
    synthetic_tokens,
)
from mico.errors import DatasetError


@pytest.fixture(scope="module")
def small_mnist1d():
    return mnist1d(seed=3, num_samples=500)


def test_mnist1d_shapes_dtypes_and_split(small_mnist1d):
    split = small_mnist1d
    assert split.x_train.shape == (400, 1, 40) and split.x_test.shape == (100, 1, 40)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    assert split.num_classes == 10 and set(np.unique(split.y_train)) == set(range(10))
    assert np.isfinite(split.x_train).all()


def test_mnist1d_is_deterministic_per_seed_and_restores_global_rng(small_mnist1d):
    random.seed(123)
    np.random.seed(123)
    expected = (random.random(), np.random.rand())
    random.seed(123)
    np.random.seed(123)
    again = mnist1d(seed=3, num_samples=500)
    assert (random.random(), np.random.rand()) == expected  # mnist1d reseeds globally
    np.testing.assert_array_equal(again.x_train, small_mnist1d.x_train)
    np.testing.assert_array_equal(again.y_test, small_mnist1d.y_test)
    other = mnist1d(seed=4, num_samples=500)
    assert not np.array_equal(other.x_train, small_mnist1d.x_train)


def test_mnist1d_cache_dir_is_written_and_reused(tmp_path, small_mnist1d):
    first = mnist1d(seed=3, num_samples=500, cache_dir=tmp_path)
    (cache,) = tmp_path.glob("mnist1d-*.npz")
    np.testing.assert_array_equal(first.x_train, small_mnist1d.x_train)
    second = mnist1d(seed=3, num_samples=500, cache_dir=tmp_path)
    np.testing.assert_array_equal(second.x_test, first.x_test)
    cache.write_bytes(b"garbage")
    with pytest.raises(DatasetError, match=r"mnist1d-.*\.npz"):
        mnist1d(seed=3, num_samples=500, cache_dir=tmp_path)


def test_mnist1d_rejects_too_few_samples():
    with pytest.raises(DatasetError, match="num_samples"):
        mnist1d(num_samples=5)


def test_mnist1d_loaders_batches():
    train, test = mnist1d_loaders(batch_size=64, num_samples=200)
    x, y = next(iter(train))
    assert tuple(x.shape) == (64, 1, 40) and tuple(y.shape) == (64,)
    assert sum(len(y) for _, y in test) == 40


def test_synthetic_is_deterministic_and_learnable():
    split = synthetic(shape=(2, 4, 4), num_classes=5, n_train=200, n_test=50, seed=7)
    assert split.x_train.shape == (200, 2, 4, 4) and split.x_train.dtype == np.float32
    assert split.y_test.shape == (50,) and split.y_test.dtype == np.int64
    assert np.bincount(split.y_train).tolist() == [40] * 5
    again = load_dataset(
        "synthetic", seed=7, shape=(2, 4, 4), num_classes=5, n_train=200, n_test=50
    )
    np.testing.assert_array_equal(again.x_test, split.x_test)
    assert not np.array_equal(synthetic(seed=8).x_train, synthetic(seed=7).x_train)
    # nearest class mean of the training data classifies the test data
    means = np.stack([split.x_train[split.y_train == c].mean(0) for c in range(5)])
    dist = ((split.x_test[:, None] - means[None]) ** 2).reshape(50, 5, -1).sum(-1)
    assert (dist.argmin(1) == split.y_test).mean() > 0.9


def test_synthetic_bad_arguments():
    with pytest.raises(DatasetError, match="num_classes"):
        synthetic(num_classes=1)
    with pytest.raises(DatasetError, match="shape"):
        synthetic(shape=(0, 3))


def test_synthetic_tokens_targets_are_next_tokens():
    split = synthetic_tokens(vocab_size=32, seq_len=12, n_train=40, n_test=8, seed=1)
    assert split.x_train.shape == (40, 12) and split.y_train.shape == (40, 12)
    assert split.x_train.dtype == np.int64 and split.y_train.dtype == np.int64
    np.testing.assert_array_equal(split.y_train[:, :-1], split.x_train[:, 1:])
    assert split.x_train.max() < 32 and split.num_classes == 32
    again = synthetic_tokens(vocab_size=32, seq_len=12, n_train=40, n_test=8, seed=1)
    np.testing.assert_array_equal(again.y_test, split.y_test)
    # the chain is sparse: each token is followed by at most 4 distinct tokens
    pairs = {(a, b) for a, b in zip(split.x_train.ravel(), split.y_train.ravel(), strict=True)}
    assert max(sum(1 for p in pairs if p[0] == t) for t in range(32)) <= 4


def test_digits_loaders_resize_to_mnist_size():
    train, test = digits_loaders(batch_size=64, resize=28)
    x, y = next(iter(train))
    assert tuple(x.shape) == (64, 1, 28, 28) and x.dtype.is_floating_point
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert y.dtype.is_floating_point is False
    assert sum(len(y) for _, y in test) == 360
    x8, _ = next(iter(digits_loaders(batch_size=64)[0]))
    assert tuple(x8.shape) == (64, 1, 8, 8)
