"""Seed 003 (the MiCo framework): its examples, with only the import lines changed.

MNIST and TinyStories cannot be downloaded here, so the examples run on offline stand-ins:
scikit-learn digits resized to 28x28 for MNIST, small files in the real formats written by the
test for the on-disk loaders. Lines the seed writes as invalid Python
(``train_loop(epochs=10, train_loader, test_loader)``: a positional argument after a keyword)
are written positionally.
"""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

# --- the seed's imports, mapped (ARCHITECTURE.md) -------------------------------------------
from mico.data import digits_loaders, mnist, tinystories
from mico.models import LeNet, LLaMa, ResNet8
from mico.quant import fuse_model, get_model_macs, list_quantize_layers, replace_quantize_layers


def test_example_1_train_lenet_then_workflow_4_reload_fuse(tmp_path) -> None:
    # Example 1 (training part), MNIST -> digits at 28x28
    torch.manual_seed(0)
    model = LeNet(in_channels=1)
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    train_loader, test_loader = digits_loaders(batch_size=64, resize=28)
    model.train_loop(3, train_loader, test_loader, verbose=False)
    (tmp_path / "output" / "ckpt").mkdir(parents=True)
    torch.save(model.state_dict(), tmp_path / "output/ckpt/lenet_mnist.pth")
    acc = model.test(test_loader)
    assert acc > 0.8

    # Workflow 4: load, apply a mixed plan, fuse, eval
    model = LeNet(1)
    model.set_qscheme([[8, 6, 6, 4, 4], [8, 8, 8, 8, 8]])
    model.load_state_dict(torch.load(tmp_path / "output/ckpt/lenet_mnist.pth"))
    model = fuse_model(model)
    model.eval()
    assert [layer.w_bits for layer in model.get_qlayers()] == [8, 6, 6, 4, 4]
    assert model.test(test_loader) > 0.7


def test_core_components_and_utils() -> None:
    model = LeNet(in_channels=1)
    assert model.n_layers == 5
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    assert len(model.get_qlayers()) == 5
    # MiCoUtils
    plain = LeNet(1)
    layers = list_quantize_layers(plain)
    assert [type(m).__name__ for m in layers] == ["Conv2d", "Conv2d", "Linear", "Linear", "Linear"]
    replace_quantize_layers(plain, [8, 6, 6, 4, 4], [8, 8, 8, 8, 8])
    assert plain(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    # conv1 6x28x28 x 25, conv2 16x10x10 x 150, fc 400*120 + 120*84 + 84*10
    assert get_model_macs(LeNet(1), (1, 1, 28, 28)) == 117600 + 240000 + 48000 + 10080 + 840


def test_example_4_resnet8_set_qscheme() -> None:
    model = ResNet8(num_classes=10)
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 10)


def _idx(path, array: np.ndarray, code: int) -> None:
    header = struct.pack(">I", 0x0800 | code) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(str(path) + ".gz", "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_dataset_api_mnist_from_a_folder(tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 32), ("t10k", 16)):
        _idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)), 3)
        _idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n), 1)
    monkeypatch.setenv("MICO_DATA", str(tmp_path))
    train_loader, test_loader = mnist(batch_size=64, num_workers=0, resize=28, shuffle=True)
    x, y = next(iter(train_loader))
    assert x.shape == (32, 1, 28, 28) and y.shape == (32,)
    model = LeNet(1)
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    model.train_loop(1, train_loader, test_loader, verbose=False)


def test_example_3_llama_on_tinystories(tmp_path) -> None:
    stories = [f"Once upon a time a cat number {i} sat on a mat and was happy." for i in range(40)]
    (tmp_path / "TinyStories-train.txt").write_text("\n<|endoftext|>\n".join(stories[:30]))
    (tmp_path / "TinyStories-valid.txt").write_text("\n<|endoftext|>\n".join(stories[30:]))
    torch.manual_seed(0)
    model = LLaMa(dim=32, n_layers=2, n_heads=2, vocab_size=300, max_seq_len=32)
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    train_loader, test_loader = tinystories(batch_size=8, seq_len=32, vocab_size=300, root=tmp_path)
    before = model.test(test_loader)
    model.train_loop(2, train_loader, test_loader, lr=3e-3, verbose=False)
    assert model.test(test_loader) > before


def test_workflow_4_generates_code_beside_the_checkpoint(tmp_path, monkeypatch) -> None:
    """`convert("output", ...)` writes into the folder holding output/ckpt/lenet_mnist.pth."""
    from mico.atomic import MARKER
    from mico.codegen import MiCoCodeGen
    from mico.errors import OutputError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "output" / "ckpt").mkdir(parents=True)
    trained = LeNet(1)
    trained.set_qscheme([[8, 6, 6, 4, 4], [8, 8, 8, 8, 8]])
    torch.save(trained.state_dict(), "output/ckpt/lenet_mnist.pth")
    checkpoint = (tmp_path / "output/ckpt/lenet_mnist.pth").read_bytes()

    model = LeNet(1)
    model.set_qscheme([[8, 6, 6, 4, 4], [8, 8, 8, 8, 8]])  # Optimal MPQ config
    model.load_state_dict(torch.load("output/ckpt/lenet_mnist.pth"))
    model = fuse_model(model)
    model.eval()
    codegen = MiCoCodeGen(model, align_to=32)
    codegen.forward(torch.randn(1, 1, 28, 28))
    codegen.convert("output", "lenet_mnist")

    assert (tmp_path / "output/lenet_mnist.h").is_file()
    assert (tmp_path / "output/lenet_mnist.bin").is_file()
    assert (tmp_path / "output/ckpt/lenet_mnist.pth").read_bytes() == checkpoint
    assert not (tmp_path / "output" / MARKER).exists()  # never mistaken for mico's own folder
    assert not [p for p in (tmp_path / "output").iterdir() if ".stage-" in p.name]

    codegen.convert("output", "lenet_mnist")  # again: mico may replace its own files
    (tmp_path / "output/notes.h").write_text("mine")
    clash = MiCoCodeGen(model, align_to=32)
    clash.forward(torch.randn(1, 1, 28, 28))
    with pytest.raises(OutputError, match=r"would replace 'notes\.h'.*mico did not write"):
        clash.convert("output", "notes")
    assert (tmp_path / "output/notes.h").read_text() == "mine"
    assert (tmp_path / "output/ckpt/lenet_mnist.pth").read_bytes() == checkpoint


# --- seed 003's searchers (issue 14): MiCoSearcher, BayesSearcher, HAQSearcher, DimTransform ----
@pytest.fixture(scope="module")
def lenet_evaluator(tmp_path_factory):
    from mico.search import MiCoEval

    torch.manual_seed(0)
    model = LeNet(in_channels=1)
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    train_loader, test_loader = digits_loaders(batch_size=64, resize=28)
    model.train_loop(1, train_loader, test_loader, verbose=False)  # enough to search on
    path = tmp_path_factory.mktemp("ckpt") / "lenet_mnist.pth"
    torch.save(model.state_dict(), path)
    return MiCoEval(model, 1, train_loader, test_loader, path)


@pytest.mark.slow
def test_example_1_mpq_search_and_its_variants(lenet_evaluator) -> None:
    from mico.search import BayesSearcher, DimTransform, HAQSearcher, MiCoSearcher

    evaluator, model = lenet_evaluator, lenet_evaluator.model
    # Example 1 (search part), as the seed writes it
    searcher = MiCoSearcher(evaluator, n_inits=10, qtypes=[4, 5, 6, 7, 8])
    max_bops = evaluator.eval_bops([8] * model.n_layers * 2)
    best_config, best_acc = searcher.search(40, "ptq_acc", "bops", max_bops * 0.5)
    assert evaluator.eval_bops(best_config) <= max_bops * 0.5
    assert len(evaluator.history) == 50
    w8a8 = evaluator.eval_f([8] * model.n_layers * 2)
    assert 0.9 * w8a8 < best_acc <= 1.0  # half the BOPs, nearly all of W8A8's accuracy
    print(f"W8A8 {w8a8:.4f}; best at half the BOPs {best_acc:.4f}: {best_config}")
    assert best_acc == max(h["ptq_acc"] for h in evaluator.history
                           if evaluator.eval_bops(h["qscheme"]) <= max_bops * 0.5)  # fmt: skip

    # "Search Interface": keywords, constraint_value=0.5 is 50% of INT8 BOPs
    searcher = BayesSearcher(evaluator, n_inits=3, qtypes=[4, 5, 6, 7, 8])
    best_x, best_y = searcher.search(
        n_iterations=3,
        objective="ptq_acc",  # Maximize accuracy
        constraint="bops",  # Constraint type (bops, size, latency_*)
        constraint_value=0.5,  # 50% of INT8 BOPs
    )
    assert evaluator.eval_bops(best_x) <= max_bops * 0.5
    assert best_y == max(v for s, v, c in searcher.history if c <= max_bops * 0.5)

    # "Best practices": a small search first; and the RL searcher on a size budget (two
    # widths: its per-layer size table lowers the graph once per layer and pair of widths)
    searcher = HAQSearcher(evaluator, n_inits=5, qtypes=[7, 8])
    constraint = evaluator.eval_size([8] * model.n_layers * 2) * 0.95
    best_x, _ = searcher.search(3, "ptq_acc", "size", constraint)
    assert evaluator.eval_size(best_x) <= constraint and min(best_x) >= 7
    assert searcher._feasible_draws < searcher._draws  # episodes over budget were enforced

    # "Dimension transformation": search fewer dimensions than the model has widths
    dim_transform = DimTransform(in_dim=4, out_dim=model.n_layers * 2, method="expand")
    searcher = MiCoSearcher(evaluator, n_inits=3, qtypes=[4, 5, 6, 7, 8], dim_trans=dim_transform)
    best_x, _ = searcher.search(2, "ptq_acc", "bops", max_bops * 0.5)
    assert searcher.dim == 4 and best_x == dim_transform.expand(dim_transform.reduce(best_x))
