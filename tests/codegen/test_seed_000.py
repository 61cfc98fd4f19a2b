"""Seed 000's examples against mico: register_function, register_module, MiCoCodeGen."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.codegen import MiCoCodeGen, MiCoOpRegistry, UnregisteredOpError
from mico.errors import BuildError, CompileError, RegistryError
from mico.ir.ops.registry import OpRegistry
from mico.targets import host

SIGMOID_C = r"""
#include <math.h>
#include "mico_f32.h"
void MiCo_sigmoid4d_f32(MicoTensor *out, const MicoTensor *in);
void MiCo_sigmoid4d_f32(MicoTensor *out, const MicoTensor *in)
{
    int32_t i;
    for (i = 0; i < out->numel; i++) {
        out->data[i] = 1.0f / (1.0f + expf(-in->data[i]));
    }
}
"""

CUSTOM_C = r"""
#include "mico_f32.h"
void MiCo_custom_activation4d_f32(MicoTensor *out, const MicoTensor *in, float alpha);
void MiCo_custom_activation4d_f32(MicoTensor *out, const MicoTensor *in, float alpha)
{
    int32_t i;
    for (i = 0; i < out->numel; i++) {
        out->data[i] = in->data[i] * alpha;
    }
}
"""


class MyCustomLayer(nn.Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return x * self.alpha


class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3)
        self.custom = MyCustomLayer(alpha=2.0)
        self.n_layers = 2

    def forward(self, x):
        x = self.conv(x)
        x = torch.sigmoid(x)  # Uses registered handler
        x = self.custom(x)  # Uses registered handler
        return x


@pytest.fixture
def scoped_registry(monkeypatch) -> Iterator[None]:
    """Registrations made by a test are undone afterwards."""
    monkeypatch.setattr(MiCoOpRegistry, "_modules", dict(MiCoOpRegistry._modules))
    with OpRegistry.scoped():
        yield


def _register_seed_handlers(sigmoid_kernel: str | None = SIGMOID_C) -> None:
    @MiCoOpRegistry.register_function(torch.sigmoid, kernel=sigmoid_kernel)
    def handle_sigmoid(codegen, n, out, input_names, input_args):
        codegen.add_uninitialized_tensor(n.name, out)
        codegen.add_forward_call("MiCo_sigmoid{dim}d_{dtype}", out, n.name, input_names)

    @MiCoOpRegistry.register_module(MyCustomLayer, kernel=CUSTOM_C)
    def handle_my_custom_layer(codegen, n, out, module, input_names):
        layer_name = n.name
        codegen.add_uninitialized_tensor(layer_name, out)
        codegen.add_forward_call(
            "MiCo_custom_activation{dim}d_{dtype}", out, layer_name, input_names, [module.alpha]
        )


def test_seed_example_builds_and_runs_with_the_handlers_kernels(scoped_registry, tmp_path):
    _register_seed_handlers()
    torch.manual_seed(0)
    model = MyModel()
    codegen = MiCoCodeGen(model, align_to=32)
    out = codegen.forward(torch.randn(1, 1, 28, 28))
    assert out.shape == (1, 16, 26, 26)
    project = codegen.convert(tmp_path / "output", "model")
    for file in ("model.h", "model.bin", "model.c", "main.c", "Makefile"):
        assert (tmp_path / "output" / file).exists()
    source = (tmp_path / "output" / "model.c").read_text()
    assert "MiCo_sigmoid4d_f32(&mico_out, &mico_in0);" in source
    assert "MiCo_custom_activation4d_f32(&mico_out, &mico_in0, 0x1" in source
    host.build(project)
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        expected = model(x).numpy()
    c_out = host.run(project, x.numpy())
    np.testing.assert_allclose(c_out, expected, rtol=1e-5, atol=1e-6)


def test_weights_file_holds_every_constant_at_aligned_offsets(scoped_registry, tmp_path):
    _register_seed_handlers()
    torch.manual_seed(0)
    codegen = MiCoCodeGen(MyModel(), align_to=32)
    codegen.forward(torch.randn(1, 1, 28, 28))
    codegen.convert(tmp_path / "out", "model")
    manifest = json.loads((tmp_path / "out" / "mico.json").read_text())
    index = manifest["weights_file"]["constants"]
    blob = (tmp_path / "out" / "model.bin").read_bytes()
    weight = next(c for c in index if c["symbol"] == "conv_weight")
    assert weight["offset"] % 32 == 0 and weight["bytes"] == 16 * 9 * 4
    values = np.frombuffer(blob[weight["offset"] : weight["offset"] + weight["bytes"]], "<f4")
    np.testing.assert_array_equal(values, codegen.model.conv.weight.detach().numpy().ravel())


def test_unregistered_function_gets_the_seeds_message(tmp_path):
    class UsesErf(nn.Module):
        def forward(self, x):
            return torch.erf(x)

    codegen = MiCoCodeGen(UsesErf())
    codegen.forward(torch.randn(1, 4))
    with pytest.raises(UnregisteredOpError) as info:
        codegen.convert(tmp_path / "out", "model")
    assert str(info.value) == (
        "Function 'torch.erf' is not registered. Use @MiCoOpRegistry.register_function() "
        "decorator to add support."
    )
    assert isinstance(info.value, RuntimeError)
    assert not (tmp_path / "out").exists()


def test_a_second_user_handler_needs_override(scoped_registry):
    _register_seed_handlers()
    with pytest.raises(RegistryError, match=r"already has a C handler.*override=True"):

        @MiCoOpRegistry.register_function(torch.sigmoid)
        def again(codegen, n, out, input_names, input_args):
            pass

    @MiCoOpRegistry.register_function(torch.sigmoid, override=True)
    def replaced(codegen, n, out, input_names, input_args):
        pass

    assert MiCoOpRegistry.is_registered(torch.sigmoid)


def test_handler_without_its_kernel_fails_to_link_with_a_clear_error(scoped_registry, tmp_path):
    _register_seed_handlers(sigmoid_kernel=None)
    codegen = MiCoCodeGen(MyModel())
    codegen.forward(torch.randn(1, 1, 28, 28))
    project = codegen.convert(tmp_path / "out", "model")
    with pytest.raises(BuildError, match="MiCo_sigmoid4d_f32"):
        host.build(project)


def test_builtin_rules_compile_seed_operations_without_handlers(tmp_path):
    """Sigmoid and the seed's pre-registered ops have built-in C rules in mico."""

    class Seedish(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 4 * 4, 5)

        def forward(self, x):
            x = torch.sigmoid(self.conv(x))
            x = nn.functional.avg_pool2d(x, 2) + nn.functional.max_pool2d(x, 2)
            x = torch.flatten(nn.functional.relu6(x), 1)
            return torch.tanh(self.fc(x))

    torch.manual_seed(0)
    model = Seedish()
    codegen = MiCoCodeGen(model, align_to=8)
    codegen.forward(torch.randn(1, 1, 8, 8))
    project = codegen.convert(tmp_path / "out", "seedish")
    host.build(project)
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        np.testing.assert_allclose(host.run(project, x.numpy()), model(x).numpy(), rtol=1e-5,
                                   atol=1e-6)  # fmt: skip


def test_convert_before_forward_and_bad_alignment_are_refused(tmp_path):
    with pytest.raises(CompileError, match="forward"):
        MiCoCodeGen(MyModel()).convert(tmp_path, "m")
    with pytest.raises(CompileError, match="power of two"):
        MiCoCodeGen(MyModel(), align_to=24)


def test_helpers_outside_a_handler_are_refused():
    with pytest.raises(CompileError, match="only be called from a handler"):
        MiCoCodeGen(MyModel()).add_uninitialized_tensor("x", torch.zeros(1))


def test_register_module_needs_a_module_class():
    with pytest.raises(RegistryError, match=r"nn\.Module subclass"):
        MiCoOpRegistry.register_module(int)


SCALE_C = r"""
#include "mico_f32.h"
void MiCo_scale2d_f32(MicoTensor *out, const MicoTensor *in, const MicoTensor *w, int32_t n);
void MiCo_scale2d_f32(MicoTensor *out, const MicoTensor *in, const MicoTensor *w, int32_t n)
{
    int32_t i;
    for (i = 0; i < out->numel; i++) {
        out->data[i] = in->data[i] * w->data[i % n];
    }
}
"""


class Scale(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 2.0, n))

    def forward(self, x):
        return x * self.weight


class Passthrough(nn.Module):
    def forward(self, x):
        return x + 0.0


def test_initialized_and_connected_tensors_and_shipped_kernels(scoped_registry, tmp_path):
    @MiCoOpRegistry.register_module(Scale)
    def handle_scale(codegen, n, out, module, input_names):
        codegen.add_initialized_tensor(f"{n.name}_w", module.weight)
        codegen.add_uninitialized_tensor(n.name, out)
        codegen.add_kernel_source("scale.c", SCALE_C)
        codegen.add_forward_call(
            "MiCo_scale{dim}d_{dtype}", out, n.name, [*input_names, f"{n.name}_w"],
            [module.weight.numel()],
        )  # fmt: skip

    @MiCoOpRegistry.register_module(Passthrough)
    def handle_passthrough(codegen, n, out, module, input_names):
        codegen.add_connect_tensor(n.name, out)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), Scale(5), Passthrough(), nn.ReLU())
    codegen = MiCoCodeGen(model)
    codegen.forward(torch.randn(1, 6))
    project = codegen.convert(tmp_path / "out", "m")
    assert "scale.c" in project.files and (tmp_path / "out" / "scale.c").exists()
    source = (tmp_path / "out" / "m.c").read_text()
    assert (
        "void MiCo_scale2d_f32(MicoTensor *, const MicoTensor *, const MicoTensor *, int32_t);"
        in source
    )
    assert "memcpy(" in source  # the connected tensor copies its input
    host.build(project)
    x = torch.randn(4, 6)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(host.run(project, x.numpy()), expected, rtol=1e-6, atol=1e-7)


def test_quantized_initialized_tensor_is_packed(scoped_registry, tmp_path):
    @MiCoOpRegistry.register_module(Scale)
    def handle_scale(codegen, n, out, module, input_names):
        codegen.add_initialized_tensor(f"{n.name}_w", module.weight, quant=4, scale=0.25)
        codegen.add_connect_tensor(n.name, out)

    codegen = MiCoCodeGen(nn.Sequential(Scale(6)))
    codegen.forward(torch.randn(1, 6))
    codegen.convert(tmp_path / "out", "m")
    weights = (tmp_path / "out" / "m_weights.h").read_text()
    assert "_w_q4[3]" in weights  # six 4-bit codes in three bytes
    with pytest.raises(CompileError, match="needs scale > 0"):

        @MiCoOpRegistry.register_module(Scale, override=True)
        def bad(codegen, n, out, module, input_names):
            codegen.add_initialized_tensor("w", module.weight, quant=4)

        codegen.convert(tmp_path / "again", "m")
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda x: F.leaky_relu(x, 0.2), (0.2,)),
        (lambda x: F.leaky_relu(x, negative_slope=0.1), (0.1,)),
        (lambda x: F.leaky_relu(x), (0.01,)),
    ],
)
def test_handler_input_args_are_the_calls_own(scoped_registry, tmp_path, call, expected):
    """input_args hold the tensor, then the call's own arguments: no stray in-place flag."""
    seen = []

    @MiCoOpRegistry.register_function(F.leaky_relu, override=True)
    def handle(codegen, n, out, input_names, input_args):
        seen.append(input_args)
        codegen.add_uninitialized_tensor(n.name, out)
        codegen.add_forward_call("MiCo_leaky{dim}d_{dtype}", out, n.name, input_names)

    class Net(nn.Module):
        def forward(self, x):
            return call(x)

    x = torch.randn(1, 4)
    codegen = MiCoCodeGen(Net())
    codegen.forward(x)
    codegen.convert(tmp_path / "out", "net")  # handlers run while the C is written
    (args,) = seen
    assert torch.equal(args[0], x)
    assert tuple(args[1:]) == pytest.approx(expected)
