"""Shared fixtures: the digits split and a small model trained on it (cheap: about a second)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator

import pytest
import torch

from mico.data import DatasetSplit, load_dataset
from mico.models import SmallCNN
from mico.targets.io import BUILD_CACHE_ENV
from mico.train import train

_OWN_BUILD_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """One object cache for the run's C builds (``$MICO_BUILD_CACHE``): hundreds of tests
    build programs from the same kernel sources, each compiled once instead of once per build.
    Set here, before pytest-xdist starts its workers, so that they share it; removed at the end
    unless the caller gave one."""
    if BUILD_CACHE_ENV not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
        _OWN_BUILD_CACHE.append(tempfile.mkdtemp(prefix="mico-test-objects-"))
        os.environ[BUILD_CACHE_ENV] = _OWN_BUILD_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _OWN_BUILD_CACHE:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tests use tiny tensors, and pytest -n 2 already keeps both cores busy: one intra-op
    thread per worker avoids contention that made small kernels up to 100x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _python_ctrl_c() -> Iterator[None]:
    """Every test starts with Python's own Ctrl-C handler (KeyboardInterrupt) and gets it back
    after: a test that leaves another handler installed must not change what the Ctrl-C tests
    of a later module in the same worker see."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def digits_split() -> DatasetSplit:
    return load_dataset("digits", seed=0)


@pytest.fixture(scope="session")
def trained_cnn(digits_split: DatasetSplit) -> SmallCNN:
    """A SmallCNN(4, 8) trained for 8 epochs (about 90% test accuracy)."""
    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8))
    train_loader, _ = digits_split.loaders(batch_size=64, seed=0)
    return train(model, train_loader, epochs=8)


@pytest.fixture(scope="session")
def calibration_batches(digits_split: DatasetSplit) -> list[torch.Tensor]:
    train_loader, _ = digits_split.loaders(batch_size=64, seed=0)
    return [x for x, _ in train_loader][:4]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules holding a test marked ``slow`` first (each module's tests stay together
    and in order, so module fixtures are still built once). Under ``pytest -n 2`` xdist hands
    out tests in this order (``--dist worksteal``: a worker that runs out takes half of the
    other's queue): the long tests then start early and short ones fill the end, instead of a
    minute-long test starting last while the other worker idles."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)
