"""Loader corpus (issue 12, part C): hostile plans, datasets, checkpoints and arguments.

Every case runs ``mico …`` (or the Python API) in a child process under the harness's time and
address-space limits, in a folder of hostile files, and asserts exit code 2, one ``error:``
line naming the thing and the fix, no traceback, no file of the folder changed or added (no
half-written output, nothing a malicious pickle would have created).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import assert_clean_error, assert_untouched, run_api, run_cli, snapshot
from hostile_files import PWNED, write_all

#: commands the hostile files are fed to; each refuses before writing anything
COMPILE = ["compile", "mlp", "--samples", "2", "-o", "out"]
COMPILE_CKPT = ["compile", "--samples", "2", "-o", "out", "--checkpoint"]
TRAIN = ["train", "mlp", "--epochs", "0", "--no-progress", "-q", "-o", "out"]
#: a case that must answer within this many seconds (a hang or a blow-up fails it)
FAST_S = 60


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_all(tmp_path_factory.mktemp("hostile"))


#: (id, mico arguments, words the error line must contain)
CLI_CASES = [
    # plans
    ("plan-duplicate-key", [*COMPILE, "--plan", "plans/dup.yaml"], ["'layers.0'", "line 4"]),
    ("plan-alias-bomb", [*COMPILE, "--plan", "plans/bomb.yaml"], ["100000 values", "aliases"]),
    ("plan-13mb", [*COMPILE, "--plan", "plans/big.yaml"], ["1048576-byte limit"]),
    ("plan-not-utf8", [*COMPILE, "--plan", "plans/latin1.yaml"], ["not UTF-8", "save it"]),
    ("plan-recursive-alias", [*COMPILE, "--plan", "plans/recursive.yaml"], ["recursive alias"]),
    ("plan-deep-nesting", [*COMPILE, "--plan", "plans/deep.yaml"], ["deep.yaml", "nested"]),
    (
        "plan-huge-bits",
        [*COMPILE, "--plan", "plans/huge_bits.yaml"],
        ["layers.0", "1000000000", "1..8"],
    ),
    (
        "plan-400k-value",
        [*COMPILE, "--plan", "plans/long_value.yaml"],
        ["layers.0", "expected {w: W, a: A}"],
    ),
    ("plan-a-list", [*COMPILE, "--plan", "plans/list.yaml"], ["must be a mapping"]),
    ("plan-broken-yaml", [*COMPILE, "--plan", "plans/broken.yaml"], ["not valid YAML", "line"]),
    ("plan-unknown-layer", [*COMPILE, "--plan", "plans/unknown_layer.yaml"], ["conv9"]),
    (
        "plan-5000-unknown-layers",
        [*COMPILE, "--plan", "plans/many_layers.yaml"],
        ["5000 layer(s)", "and 4992 more", "no bit-widths for layers.0"],
    ),
    ("plan-directory", [*COMPILE, "--plan", "plans/a_directory"], ["is a directory"]),
    ("plan-device", [*COMPILE, "--plan", "/dev/zero"], ["/dev/zero", "not a regular file"]),
    ("plan-300-chars", [*COMPILE, "--plan", "p" * 300], ["neither a file nor layer=W/A"]),
    ("plan-300-char-entry", [*COMPILE, "--plan", "l=" + "p" * 300], ["not of the form"]),
    ("plan-missing-yaml", [*COMPILE, "--plan", "nope.yaml"], ["nope.yaml", "does not exist"]),
    # checkpoints
    ("ckpt-directory", [*COMPILE_CKPT, "ckpt/a_directory"], ["a_directory", "is a directory"]),
    ("ckpt-missing", [*COMPILE_CKPT, "ckpt/nope.pt"], ["nope.pt", "does not exist"]),
    ("ckpt-unknown-arg", [*COMPILE_CKPT, "ckpt/unknown_arg.pt"], ["'bogus'", "load_checkpoint"]),
    ("ckpt-num-classes", [*COMPILE_CKPT, "ckpt/num_classes.pt"], ["num_classes=1000000000"]),
    ("ckpt-too-wide", [*COMPILE_CKPT, "ckpt/too_wide.pt"], ["parameters", "100,000,000"]),
    ("ckpt-bad-kwargs", [*COMPILE_CKPT, "ckpt/bad_kwargs.pt"], ["damaged", "arguments"]),
    ("ckpt-garbage", [*COMPILE_CKPT, "ckpt/garbage.pt"], ["garbage.pt", "cannot be read"]),
    ("ckpt-malicious", [*COMPILE_CKPT, "ckpt/malicious.pt"], ["malicious.pt", "cannot be read"]),
    # training numbers
    ("train-lr-nan", [*TRAIN, "--lr", "nan"], ["--lr is nan", "--lr 1e-3"]),
    ("train-lr-inf", [*TRAIN, "--lr", "inf"], ["--lr is inf"]),
    ("train-lr-negative", [*TRAIN, "--lr", "-0.1"], ["--lr is -0.1"]),
    ("train-lr-huge", [*TRAIN, "--lr", "1e3"], ["--lr is 1000.0", "(0, 10]"]),
    ("train-batch-zero", [*TRAIN, "--batch-size", "0"], ["--batch-size is 0", ">= 1"]),
    ("train-epochs-negative", [*TRAIN, "--epochs", "-1"], ["--epochs is -1", ">= 0"]),
    ("train-qat-epochs-negative", [*TRAIN, "--qat-epochs", "-5"], ["--qat-epochs is -5"]),
    ("train-resize-zero", [*TRAIN, "--resize", "0"], ["--resize is 0"]),
    ("train-seed-negative", [*TRAIN, "--seed", "-1"], ["--seed is -1", "4294967295"]),
    # MNIST IDX files
    (
        "mnist-missing",
        [*TRAIN, "--dataset", "mnist", "--root", "mnist/empty"],
        ["mnist/empty", "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "--root"],
    ),
    (
        "mnist-7x9",
        [*TRAIN, "--dataset", "mnist", "--root", "mnist/small_images"],
        ["7x9", "28x28", "train-images-idx3-ubyte"],
    ),
    (
        "mnist-dims-wrap-int64",
        [*TRAIN, "--dataset", "mnist", "--root", "mnist/wrapping_dims"],
        ["truncated", "(2147483648, 2147483648, 4)"],
    ),
    (
        "mnist-huge-dims",
        [*TRAIN, "--dataset", "mnist", "--root", "mnist/huge_dims"],
        ["truncated", "4294967295"],
    ),
    (
        "mnist-bad-magic",
        [*TRAIN, "--dataset", "fashion_mnist", "--root", "mnist/bad_magic"],
        ["bad IDX magic number 0x89504E47"],
    ),
    (
        "mnist-truncated",
        [*TRAIN, "--dataset", "mnist", "--root", "mnist/truncated"],
        ["train-images-idx3-ubyte", "truncated"],
    ),
    # CIFAR pickles
    (
        "cifar-8-pib-array",
        [*TRAIN, "--dataset", "cifar10", "--root", "cifar/huge_array"],
        ["data_batch_1", "9007199254740992 bytes"],
    ),
    (
        "cifar-malicious",
        [*TRAIN, "--dataset", "cifar10", "--root", "cifar/malicious"],
        ["data_batch_1", "refusing to load posix.system"],
    ),
]


@pytest.mark.parametrize(
    ("args", "words"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_cli_refuses_hostile_input(hostile: Path, args: list[str], words: list[str]) -> None:
    before = snapshot(hostile)
    start = time.monotonic()
    result = run_cli(args, hostile)
    assert time.monotonic() - start < FAST_S, f"took {time.monotonic() - start:.0f} s"
    assert_clean_error(result, *words)
    assert_untouched(before, hostile)
    assert not (hostile / PWNED).exists()


#: (id, Python source run in the hostile folder, words the error line must contain)
API_CASES = [
    (
        "QuantPlan.load-alias-bomb",
        "from mico.quant import QuantPlan\nQuantPlan.load('plans/bomb.yaml')",
        ["PlanError", "100000 values"],
    ),
    (
        "QuantPlan.load-duplicate",
        "from mico.quant import QuantPlan\nQuantPlan.load('plans/dup.yaml')",
        ["PlanError", "duplicate key 'layers.0' at line 4 (first at line 1)"],
    ),
    (
        "quantize_model-13mb-plan",
        "from mico.models import from_zoo\nfrom mico.quant import quantize_model\n"
        "quantize_model(from_zoo('mlp'), 'plans/big.yaml')",
        ["PlanError", "1048576-byte limit"],
    ),
    (
        "read_mnist-7x9",
        "from mico.data import read_mnist\nread_mnist('mnist/small_images')",
        ["DatasetError", "7x9"],
    ),
    (
        "read_idx-wrap",
        "from mico.data import read_idx\nread_idx('mnist/wrapping_dims/train-images-idx3-ubyte')",
        ["DatasetError", "truncated"],
    ),
    (
        "read_cifar10-8-pib",
        "from mico.data import read_cifar10\nread_cifar10('cifar/huge_array')",
        ["DatasetError", "declares an array"],
    ),
    (
        "read_cifar10-malicious",
        "from mico.data import read_cifar10\nread_cifar10('cifar/malicious')",
        ["DatasetError", "refusing to load"],
    ),
    (
        "load_checkpoint-num-classes",
        "from mico.train import load_checkpoint\nload_checkpoint('ckpt/num_classes.pt')",
        ["CheckpointError", "num_classes"],
    ),
    (
        "load_checkpoint-unknown-arg",
        "from mico.train import load_checkpoint\nload_checkpoint('ckpt/unknown_arg.pt')",
        ["CheckpointError", "bogus"],
    ),
    (
        "load_checkpoint-directory",
        "from mico.train import load_checkpoint\nload_checkpoint('ckpt')",
        ["CheckpointError", "is a directory"],
    ),
    (
        "run_train-lr-nan",
        "from pathlib import Path\nfrom mico.train.run import TrainOptions, run_train\n"
        "run_train(TrainOptions(model='mlp', out_dir=Path('out'), lr=float('nan')))",
        ["ConfigError", "lr is nan"],
    ),
    (
        "run_train-batch-zero",
        "from pathlib import Path\nfrom mico.train.run import TrainOptions, run_train\n"
        "run_train(TrainOptions(model='mlp', out_dir=Path('out'), batch_size=0))",
        ["ConfigError", "batch_size is 0"],
    ),
]


@pytest.mark.parametrize(
    ("source", "words"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_api_refuses_hostile_input(hostile: Path, source: str, words: list[str]) -> None:
    before = snapshot(hostile)
    start = time.monotonic()
    result = run_api(source, hostile)
    assert time.monotonic() - start < FAST_S, f"took {time.monotonic() - start:.0f} s"
    assert_clean_error(result, *words)
    assert_untouched(before, hostile)
    assert not (hostile / PWNED).exists()


def test_corpus_is_large_enough() -> None:
    assert len(CLI_CASES) + len(API_CASES) >= 25
