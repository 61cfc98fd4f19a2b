import numpy as np
import pytest
import torch
from torch import nn

from mico.errors import CompileError, UnsupportedOpError
from mico.execute import run_graph
from mico.ir import DataType
from mico.ir.ops import mico_ops
from mico.pipeline import lower_model, quantize_ptq, top1
from mico.quant import QFormat, QuantPlan, dequantize


@pytest.fixture(scope="module")
def quantized(trained_cnn, calibration_batches):
    plan = QuantPlan.parse("conv1=8/8,conv2=4/4,fc=4/8")
    return quantize_ptq(trained_cnn, plan, calibration_batches)


def test_lowered_graph_structure(quantized):
    graph = lower_model(quantized, torch.zeros(1, 1, 8, 8), "cnn")
    assert [n.op for n in graph.nodes] == [
        mico_ops.QUANTIZE,
        mico_ops.QCONV2D,
        mico_ops.MAXPOOL2D,
        mico_ops.QCONV2D,
        mico_ops.MAXPOOL2D,
        mico_ops.RESHAPE,
        mico_ops.QLINEAR,
    ]
    quant, conv1, pool1, conv2, _, flat, fc = graph.nodes
    # the input is quantized to conv1's 8-bit unsigned input codes
    assert quant.attrs["qformat"] == QFormat(8, signed=False)
    # conv1 (ReLU fused) requantizes straight to conv2's 4-bit input codes
    assert conv1.attrs["relu"] is True
    assert conv1.attrs["requant"]["qformat"] == QFormat(4, signed=False)
    assert conv1.output.type.dtype == DataType.uint(4)
    assert pool1.output.qformat == QFormat(4, signed=False)
    assert conv2.attrs["requant"]["qformat"] == QFormat(8, signed=False)
    assert flat.output.alias_of is not None
    # the last layer keeps its int32 accumulator, with the scale to read it
    assert fc.attrs["requant"] is None and fc.output.type.dtype == DataType.INT32
    assert fc.output.scale == pytest.approx(quantized.fc.act_scale * quantized.fc.weight_scale)
    assert conv1.inputs[1].qformat == QFormat(8, signed=True)
    assert fc.inputs[1].qformat == QFormat(4, signed=True)


def test_integer_reference_tracks_the_fake_quant_model(quantized, digits_split):
    graph = lower_model(quantized, torch.zeros(1, 1, 8, 8))
    ints = run_graph(graph, digits_split.x_test)[0]
    assert ints.dtype == torch.int64
    real = dequantize(ints.numpy().astype(np.float64), graph.outputs[0].scale)
    with torch.no_grad():
        fake = quantized(torch.from_numpy(digits_split.x_test)).numpy()
    # same arithmetic up to requantization rounding: logits close, decisions nearly all equal
    assert np.abs(real - fake).max() < 0.25 * np.abs(fake).max()
    assert (real.argmax(1) == fake.argmax(1)).mean() > 0.95
    assert top1(ints.numpy(), digits_split.y_test) > 0.8


def test_unsupported_op_is_named():
    class WithSigmoid(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return torch.log_softmax(self.fc(x), dim=-1)

    model = quantize_ptq(WithSigmoid(), QuantPlan.parse("fc=8/8"), [torch.randn(8, 4)])
    with pytest.raises(UnsupportedOpError, match=r"aten.log_softmax.int at 'log_softmax'"):
        lower_model(model, torch.zeros(1, 4))


def test_uncalibrated_layers_cannot_be_lowered(trained_cnn):
    from mico.quant import apply_plan

    model = apply_plan(trained_cnn, QuantPlan.parse("conv1=8/8,conv2=8/8,fc=8/8"))
    with pytest.raises(CompileError, match="layer 'conv1' is not calibrated"):
        lower_model(model, torch.zeros(1, 1, 8, 8))


def test_legacy_lower_quantized_still_compiles_bit_exact(quantized, digits_split, tmp_path):
    """The first, per-tensor lowering (LayerQuant / lower_quantized) runs on the same kernels."""
    from mico.codegen import emit_c_project
    from mico.frontend import export_graph
    from mico.passes import LayerQuant, lower_quantized
    from mico.quant import bit_layers, float_mode
    from mico.targets import host

    with float_mode(quantized):
        graph = export_graph(quantized, torch.zeros(1, 1, 8, 8))
    layers = {n: LayerQuant.from_layer(n, layer) for n, layer in bit_layers(quantized).items()}
    lowered = lower_quantized(graph, layers)
    project = emit_c_project(lowered, tmp_path, "legacy")
    host.build(project)
    x = digits_split.x_test[:50]
    assert np.array_equal(host.run(project, x), run_graph(lowered, x)[0].numpy())
