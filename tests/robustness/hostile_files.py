"""Hostile input files for the loader corpus: plans, IDX/MNIST, CIFAR pickles, checkpoints.

:func:`write_all` fills a folder with every file once; each corpus case names the one it feeds
to mico. The files are built from honest ones and then damaged the way a careless or hostile
user would, so each exercises one check.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np

#: a file a malicious pickle would create if it ever ran its code
PWNED = "pwned.txt"

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
PLAN_OK = "layers.0: {w: 8, a: 8}\nlayers.2: {w: 8, a: 8}\nlayers.4: {w: 8, a: 8}\n"


class _Reduce:
    """Pickles as ``func(*args)``: how a hostile pickle asks the loader to call something."""

    def __init__(self, func: Any, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def idx(array: np.ndarray) -> bytes:
    """A uint8 array as an IDX file."""
    header = struct.pack(">I", 0x0800 | array.ndim)
    return header + b"".join(struct.pack(">I", n) for n in array.shape) + array.tobytes()


def write_plans(root: Path) -> None:
    """Plan files: duplicate key, alias bomb, 13 MB, non-UTF-8, recursive, deep, huge values."""
    plans = root / "plans"
    plans.mkdir()
    (plans / "dup.yaml").write_text(PLAN_OK + "layers.0: {w: 2, a: 2}\n")
    (plans / "bomb.yaml").write_text(ALIAS_BOMB + "layers.0: {w: *i, a: 8}\n")
    (plans / "big.yaml").write_text(PLAN_OK + ("# padding\n" * (13 * 2**20 // 10)))
    (plans / "latin1.yaml").write_bytes(PLAN_OK.encode() + b"# r\xe9sum\xe9\n")
    (plans / "recursive.yaml").write_text("layers.0: &x [8, *x]\n")
    (plans / "deep.yaml").write_text("layers.0: " + "[" * 20_000 + "]" * 20_000 + "\n")
    (plans / "huge_bits.yaml").write_text(PLAN_OK.replace("{w: 8", "{w: 1000000000", 1))
    (plans / "long_value.yaml").write_text("layers.0: " + "x" * 400_000 + "\n")
    (plans / "list.yaml").write_text("- 8\n- 8\n")
    (plans / "broken.yaml").write_text("layers.0: {w: 8, a: 8\nlayers.2: [\n")
    (plans / "unknown_layer.yaml").write_text(PLAN_OK + "conv9: {w: 8, a: 8}\n")
    many = "".join(f"layer{i}_{'x' * 60}: {{w: 8, a: 8}}\n" for i in range(5000))
    (plans / "many_layers.yaml").write_text(many)
    (plans / "a_directory").mkdir()


def write_mnist_sets(root: Path) -> None:
    """MNIST folders, each with one damaged file: 7x9 images, wrapping dims, bad magic…"""

    def mnist(name: str, images: bytes | None = None) -> Path:
        folder = root / "mnist" / name
        folder.mkdir(parents=True)
        for prefix, n in (("train", 4), ("t10k", 2)):
            (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
                idx(np.zeros((n, 28, 28), np.uint8))
            )
            (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(idx(np.zeros(n, np.uint8)))
        if images is not None:
            (folder / "train-images-idx3-ubyte").write_bytes(images)
        return folder

    mnist("small_images", idx(np.zeros((4, 7, 9), np.uint8)))
    mnist("wrapping_dims", struct.pack(">IIII", 0x0803, 2**31, 2**31, 4))
    mnist("huge_dims", struct.pack(">IIII", 0x0803, 2**32 - 1, 2**32 - 1, 2**32 - 1) + b"\0" * 64)
    mnist("bad_magic", b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    mnist("truncated", idx(np.zeros((4, 28, 28), np.uint8))[:-100])
    (root / "mnist" / "empty").mkdir()


def write_cifar_sets(root: Path) -> None:
    """CIFAR-10 folders whose first batch declares 8 PiB, or would run ``os.system``."""
    import os

    names = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]
    bombs = {
        "huge_array": {b"data": _Reduce(np.ndarray, ((8 * 2**50,), "u1")), b"labels": [0]},
        "malicious": {b"data": _Reduce(os.system, (f"touch {PWNED}",)), b"labels": [0]},
    }
    for name, first in bombs.items():
        folder = root / "cifar" / name / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for file in names:
            honest = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}
            batch = first if file == "data_batch_1" else honest
            (folder / file).write_bytes(pickle.dumps(batch, protocol=2))


def write_checkpoints(root: Path) -> None:
    """An honest mlp checkpoint and copies whose recorded constructor arguments are hostile."""
    import os

    import torch

    from mico.models import from_zoo
    from mico.train.checkpoint import save_checkpoint

    folder = root / "ckpt"
    folder.mkdir()
    honest = save_checkpoint(from_zoo("mlp"), folder / "honest.pt")
    forged = {
        "unknown_arg": {"kwargs": {"bogus": 1}},
        "num_classes": {"kwargs": {"num_classes": 10**9}},
        "too_wide": {"kwargs": {"hidden": [100_000, 100_000]}},
        "bad_kwargs": {"kwargs": [1, 2]},
    }
    for name, change in forged.items():
        data = torch.load(honest, weights_only=True)
        data["model"].update(change)
        torch.save(data, folder / f"{name}.pt")
    (folder / "garbage.pt").write_bytes(b"not a checkpoint at all" * 10)
    (folder / "malicious.pt").write_bytes(
        pickle.dumps({"state_dict": _Reduce(os.system, (f"touch {PWNED}",))})
    )
    (folder / "a_directory").mkdir()


def write_all(root: Path) -> Path:
    """Every hostile file under ``root``; returns it."""
    write_plans(root)
    write_mnist_sets(root)
    write_cifar_sets(root)
    write_checkpoints(root)
    return root
