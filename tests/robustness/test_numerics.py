"""Numerics corpus (issue 12, part D): never a silent wrong result.

NaN and Inf input samples, non-finite parameters, a dataset of the wrong shape, zero-size
tensors and models the C backend cannot deploy yet: each case runs ``mico …`` (or the Python
API) in a child process and must end as a one-line mico error (exit 2) that names the sample,
the tensor or the shapes, with nothing written outside mico's own output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness import assert_clean_error, assert_untouched, run_api, run_cli, snapshot

from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.train.checkpoint import save_checkpoint


def _uniform(model: torch.nn.Module, bits: str) -> str:
    return ",".join(f"{name}={bits}" for name in model.quantize_layer_names())


def _checkpoint(path: Path, mode: str, poison: str, value: float) -> Path:
    """A quantized (and, in static mode, calibrated) mlp checkpoint with one bad value."""
    torch.manual_seed(0)
    model = from_zoo("mlp")
    quantize_model(model, _uniform(model, "8/8"), QuantConfig(act_mode=mode))
    model.eval()
    if mode == "static":
        calibrate(model, [torch.randn(8, *model.default_input_shape)])
    with torch.no_grad():
        dict(model.named_parameters())[poison].view(-1)[3] = value
    return save_checkpoint(model, path)


#: (id, mode, poisoned tensor, value, command)
CHECKPOINT_CASES = [
    ("compile-static-nan-bias", "static", "layers.0.bias", float("nan"), "compile"),
    ("compile-dynamic-nan-bias", "dynamic", "layers.0.bias", float("nan"), "compile"),
    ("compile-static-inf-weight", "static", "layers.2.weight", float("inf"), "compile"),
    ("compile-dynamic-neg-inf-weight", "dynamic", "layers.4.weight", float("-inf"), "compile"),
    ("verify-static-nan-weight", "static", "layers.0.weight", float("nan"), "verify"),
]


@pytest.mark.parametrize(
    ("mode", "tensor", "value", "command"),
    [c[1:] for c in CHECKPOINT_CASES],
    ids=[c[0] for c in CHECKPOINT_CASES],
)
def test_non_finite_parameters_are_refused_naming_the_tensor(
    tmp_path, mode, tensor, value, command
):
    ckpt = _checkpoint(tmp_path / "bad.pt", mode, tensor, value)
    before = snapshot(tmp_path)
    result = run_cli(
        [command, "--checkpoint", str(ckpt), "--mode", mode, "--samples", "4", "-o", "out"],
        tmp_path,
    )
    line = assert_clean_error(result, tensor)
    assert "nan" in line.lower() or "inf" in line.lower() or "non-finite" in line.lower()
    assert_untouched(before, tmp_path)  # no project with -9223372036854775808 in it


@pytest.mark.parametrize(
    ("kwargs", "node"),
    [({"num_classes": 0}, "linear_2"), ({"hidden": (64, 0)}, "linear_1")],
    ids=["classes-0", "hidden-0"],
)
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_layer_with_zero_outputs_is_refused_naming_it(tmp_path, kwargs, node, mode):
    from mico.models import MLP

    ckpt = save_checkpoint(MLP(**kwargs), tmp_path / "zero.pt")
    before = snapshot(tmp_path)
    result = run_cli(
        ["compile", "--checkpoint", str(ckpt), "--mode", mode, "--samples", "2", "-o", "out"],
        tmp_path,
    )
    assert_clean_error(result, f"'{node}'", "(1, 0)", "no elements", "at least one output")
    assert_untouched(before, tmp_path)


#: (id, CLI arguments, words the error line must contain)
CLI_CASES = [
    (
        "compile-small_cnn-mnist1d-static",
        ["compile", "small_cnn", "--dataset", "mnist1d", "--mode", "static"],
        ["mnist1d", "(1, 40)", "(1, 8, 8)"],
    ),
    (
        "verify-mlp-mnist1d",
        ["verify", "mlp", "--dataset", "mnist1d"],
        ["mnist1d", "(1, 40)", "(1, 8, 8)"],
    ),
]


@pytest.mark.parametrize(
    ("args", "words"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_cli_refuses_what_it_cannot_do_right(tmp_path, args, words):
    before = snapshot(tmp_path)
    result = run_cli([*args, "--samples", "4", "-o", "out"], tmp_path)
    assert_clean_error(result, *words)
    assert_untouched(before, tmp_path)


_STATIC_MLP = """
import numpy as np, torch
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.codegen.compile import compile_model
torch.manual_seed(0)
model = from_zoo("mlp")
quantize_model(model, "layers.0=8/8,layers.2=8/8,layers.4=8/8", QuantConfig(act_mode="static"))
x = torch.randn(8, 1, 8, 8)
calibrate(model.eval(), [x])
samples = x.numpy().copy()
"""

#: (id, Python source run in a child, words the error line must contain)
API_CASES = [
    (
        "reference-nan-sample",
        _STATIC_MLP
        + """
compiled = compile_model(model, x[:1], "out", mode="static", calibration=[x])
samples[5, 0, 2, 3] = np.nan
compiled.reference(samples)
""",
        ["InputError", "sample 5", "element 19", "nan"],
    ),
    (
        "host.run-inf-sample",
        _STATIC_MLP
        + """
from mico.targets import host
compiled = compile_model(model, x[:1], "out", mode="static", calibration=[x])
host.build(compiled.project)
samples[2, 0, 7, 7] = -np.inf
host.run(compiled.project, samples)
""",
        ["InputError", "sample 2", "element 63", "-inf"],
    ),
    (
        "run_graph-nan-sample",
        _STATIC_MLP
        + """
from mico.execute import run_graph
compiled = compile_model(model, x[:1], "out", mode="static", calibration=[x])
samples[0, 0, 0, 0] = np.nan
run_graph(compiled.graph, samples)
""",
        ["InputError", "input 'x' sample 0", "element 0"],
    ),
    (
        "dynamic-reference-inf-sample",
        """
import numpy as np, torch
from mico.models import from_zoo
from mico.quant import QuantConfig, quantize_model
from mico.codegen.compile import compile_model
model = from_zoo("mlp")
quantize_model(model, "layers.0=4/8,layers.2=4/8,layers.4=4/8", QuantConfig(act_mode="dynamic"))
compiled = compile_model(model, model.example_input(), "out", mode="dynamic")
samples = np.zeros((3, 1, 8, 8), np.float32)
samples[1, 0, 1, 1] = np.inf
compiled.reference(samples)
""",
        ["InputError", "sample 1", "element 9", "inf"],
    ),
    (
        "calibrate-nan-batch",
        """
import torch
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
model = from_zoo("mlp")
quantize_model(model, "layers.0=8/8,layers.2=8/8,layers.4=8/8", QuantConfig(act_mode="static"))
good, bad = torch.zeros(4, 1, 8, 8), torch.zeros(4, 1, 8, 8)
bad[3, 0, 0, 1] = float("nan")
calibrate(model.eval(), [good, bad])
""",
        ["InputError", "calibration batch 1", "sample 3", "element 1"],
    ),
    (
        "compile_model-nan-example",
        """
import torch
from mico.codegen.compile import compile_model
from mico.models import from_zoo
example = torch.zeros(1, 1, 8, 8)
example[0, 0, 4, 4] = float("nan")
compile_model(from_zoo("mlp"), example, "out")
""",
        ["InputError", "example input sample 0", "element 36"],
    ),
    (
        "compile_model-zero-size-example",
        """
import torch
from mico.codegen.compile import compile_model
from mico.models import from_zoo
compile_model(from_zoo("mlp"), torch.zeros(1, 0), "out")
""",
        ["InputError", "(1, 0)", "no sample elements"],
    ),
    (
        "compile_model-zero-batch-example",
        """
import torch
from mico.codegen.compile import compile_model
from mico.models import from_zoo
compile_model(from_zoo("mlp"), torch.zeros(0, 1, 8, 8), "out")
""",
        ["InputError", "(0, 1, 8, 8)"],
    ),
    (
        "compile_model-linear-64-0",
        """
import torch
from torch import nn
from mico.codegen.compile import compile_model
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 0))
compile_model(model, torch.zeros(1, 64), "out")
""",
        ["CompileError", "(1, 0)", "no elements", "at least one output"],
    ),
    (
        "compile_model-static-linear-64-0",
        """
import torch
from torch import nn
from mico.codegen.compile import compile_model
from mico.quant import QuantConfig, calibrate, quantize_model
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 0))
quantize_model(model, "1=8/8,3=8/8", QuantConfig(act_mode="static"))
x = torch.randn(4, 64)
calibrate(model.eval(), [x])
compile_model(model, x[:1], "out", mode="static", calibration=[x])
""",
        ["CompileError", "(1, 0)", "no elements"],
    ),
    (
        "compile_model-nan-bias-float-model",
        """
import torch
from mico.codegen.compile import compile_model
from mico.models import from_zoo
model = from_zoo("small_cnn")
with torch.no_grad():
    model.conv1.bias[2] = float("nan")
compile_model(model, model.example_input(), "out")
""",
        ["ParameterError", "conv1.bias", "index (2,)"],
    ),
    (
        "calibrate-inf-weight",
        """
import torch
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
model = from_zoo("small_cnn")
with torch.no_grad():
    model.fc.weight[1, 2] = float("inf")
quantize_model(model, "conv1=4/8,conv2=4/8,fc=4/8", QuantConfig(act_mode="static"))
calibrate(model.eval(), [torch.zeros(2, 1, 8, 8)])
""",
        ["ParameterError", "fc.weight", "inf"],
    ),
    (
        "MiCoCodeGen-nan-running-var",
        """
import torch
from torch import nn
from mico.codegen import MiCoCodeGen
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
model[1].running_var[0] = float("nan")
MiCoCodeGen(model).forward(torch.zeros(1, 1, 8, 8))
""",
        ["ParameterError", "running_var"],
    ),
    (
        "compile_from_options-dataset-shape",
        """
from pathlib import Path
from mico.deploy import DeployOptions, compile_from_options
compile_from_options(DeployOptions(model="small_cnn", dataset="mnist1d", mode="static",
                                   samples=4, out_dir=Path("out")), log=lambda _: None)
""",
        ["DatasetError", "(1, 40)", "(1, 8, 8)"],
    ),
]


@pytest.mark.parametrize(
    ("source", "words"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_api_refuses_with_a_mico_error(tmp_path, source, words):
    before = snapshot(tmp_path)
    result = run_api(source, tmp_path)
    assert_clean_error(result, *words)
    assert_untouched(before, tmp_path, allowed=("out", ".out"))  # a case may compile first
