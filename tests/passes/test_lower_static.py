"""lower_static: the integer-only graph of a static-mode model, its formats and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import CompileError, UnsupportedOpError
from mico.execute import run_graph
from mico.ir import DataType, extract_ir
from mico.ir.ops import mico_ops
from mico.passes import lower_static
from mico.quant import QFormat, QuantConfig, calibrate, quantize, quantize_model


def lowered(model: nn.Module, plan: str, shape, config=None, **options):
    torch.manual_seed(0)
    example = torch.zeros((1, *shape))
    batches = [torch.randn((8, *shape)) for _ in range(2)]
    quantize_model(model, plan, config or QuantConfig(act_mode="static"), example)
    calibrate(model.eval(), batches)
    graph = lower_static(extract_ir(model, example), batches, **options)
    return graph, model, batches


def ops(graph):
    return [n.op for n in graph.nodes]


def node(graph, op, index=0):
    return [n for n in graph.nodes if n.op == op][index]


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv0 = nn.Conv2d(2, 4, 3, padding=1)
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = F.relu(self.conv0(x))
        out = F.relu(self.conv2(F.relu(self.conv1(y))) + y)
        return self.fc(out.mean((2, 3)))


def test_residual_block_formats_and_rescaling():
    graph, model, _ = lowered(Residual(), "conv0=8/8,conv1=4/4,conv2=4/4,fc=8/6", (2, 6, 6))
    assert ops(graph) == [
        mico_ops.QUANTIZE,
        mico_ops.QCONV2D,  # conv0 -> y, kept at 8 bits: the add reads it too
        mico_ops.REQUANT,  # y -> conv1's 4-bit input codes
        mico_ops.QCONV2D,
        mico_ops.QCONV2D,
        mico_ops.ADD,
        mico_ops.MEAN,
        mico_ops.QLINEAR,
    ]
    conv0, to_conv1, conv1, conv2, add, mean, fc = graph.nodes[1:]
    y = conv0.output
    assert y.qformat == QFormat(8, signed=False) and conv0.attrs["relu"]
    assert to_conv1.output.qformat == QFormat(4, False) and to_conv1.inputs[0] is y
    assert to_conv1.output.scale == pytest.approx(model.conv1.act_scale)
    assert conv1.attrs["requant"]["qformat"] == model.conv2.a_fmt  # straight to conv2's codes
    # the add rescales conv2's output and the shortcut y with two multipliers, one shift
    assert add.inputs == [conv2.output, y] and len(add.attrs["m"]) == 2
    assert add.attrs["clamp"][0] == 0  # the fused ReLU
    assert add.output.qformat == QFormat(8, False)  # observed range, the plan's widest: 8 bits
    # the mean requantizes its integer sum to the fc's input codes
    assert mean.output.qformat == model.fc.a_fmt and mean.attrs["count"] == 36
    # the output is fc's int32 accumulator, with its real scale
    assert fc.attrs["requant"] is None and fc.output.type.dtype == DataType.INT32
    assert graph.outputs[0].scale == pytest.approx(model.fc.act_scale * model.fc.weight_scale)
    x = torch.randn(16, 2, 6, 6)
    real = run_graph(graph, x)[0].numpy() * graph.outputs[0].scale
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(real - expected).max() < 0.1 * np.abs(expected).max()


class TwoWays(nn.Module):
    """One tensor feeding two layers with different input formats, then a concat."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(1, 4, 3, padding=1)
        self.a = nn.Conv2d(4, 2, 1)
        self.b = nn.Conv2d(4, 2, 3, padding=1)
        self.fc = nn.Linear(4 * 25, 2)

    def forward(self, x):
        y = F.relu(self.conv0(x))
        z = torch.cat([F.relu(self.a(y)), F.relu(self.b(y))], dim=1)
        return self.fc(z.flatten(1))


def test_tensor_feeding_layers_with_different_formats_is_requantized():
    graph, model, _ = lowered(TwoWays(), "conv0=8/8,a=4/4,b=6/6,fc=8/5", (1, 5, 5))
    conv0 = graph.nodes[1]
    assert conv0.output.qformat == QFormat(6, False)  # the widest of the two layers' formats
    requant = node(graph, mico_ops.REQUANT)
    assert requant.inputs[0] is conv0.output and requant.output.qformat == QFormat(4, False)
    # both branches requantize straight to the concat's format (fc's input codes): a copy
    cat = node(graph, mico_ops.CONCAT)
    assert cat.attrs["parts"] == [None, None] and cat.output.qformat == model.fc.a_fmt
    assert node(graph, mico_ops.RESHAPE).output.alias_of is cat.output


def test_conv1d_and_maxpool1d_lower_through_height_one_views():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(2, 3, 5, stride=2, padding=2, dilation=1)
            self.fc = nn.Linear(3 * 4, 2)

        def forward(self, x):
            return self.fc(F.max_pool1d(F.relu(self.conv(x)), 2).flatten(1))

    graph, model, _ = lowered(Net(), "conv=4/8,fc=3/4", (2, 16))
    conv = node(graph, mico_ops.QCONV2D)
    assert conv.inputs[0].type.shape == (1, 2, 1, 16) and conv.inputs[0].alias_of is not None
    assert conv.inputs[1].type.shape == (3, 2, 1, 5)
    assert conv.attrs["stride"] == [1, 2] and conv.attrs["padding"] == [0, 2]
    pool = node(graph, mico_ops.MAXPOOL2D)
    assert pool.attrs["kernel_size"] == [1, 2] and pool.attrs["stride"] == [1, 2]
    x = torch.randn(8, 2, 16)
    real = run_graph(graph, x)[0].numpy() * graph.outputs[0].scale
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(real - expected).max() < 0.15 * np.abs(expected).max()


def test_model_ending_in_a_mean_outputs_its_integer_sum():
    class Net(nn.Module):  # SqueezeNet's classifier: conv1x1 then global average pooling
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 5, 1)

        def forward(self, x):
            return self.conv(x).flatten(2).mean(-1)

    graph, _, _ = lowered(Net(), "conv=8/8", (3, 4, 4))
    conv, mean = graph.nodes[1], graph.nodes[-1]
    assert mean.op == mico_ops.MEAN and graph.outputs == [mean.output]
    assert mean.output.type.dtype == DataType.INT32 and mean.attrs["out"]["m"] is None
    assert mean.output.scale == pytest.approx(conv.output.scale / 16)
    assert conv.output.qformat == QFormat(8, True)  # from the observed range: signed


def test_relu6_becomes_a_code_clamp_and_per_channel_weights_get_per_channel_multipliers():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 9, 3)

        def forward(self, x):
            return self.fc(F.relu6(self.conv(x)).flatten(1))

    config = QuantConfig(act_mode="static", weight_granularity="channel")
    graph, model, _ = lowered(Net(), "conv=6/8,fc=4/8", (2, 3, 3), config)
    conv = node(graph, mico_ops.QCONV2D)
    requant = conv.attrs["requant"]
    assert len(requant["m"]) == 4 and len(requant["shift"]) == 4
    six = int(quantize(np.float32([6.0]), model.fc.act_scale, model.fc.a_fmt)[0])
    assert requant["clamp"] == [0, six]
    # the last layer's per-channel accumulators are rescaled to one int32 scale
    last = graph.nodes[-1]
    assert last.op == mico_ops.REQUANT and len(last.attrs["out"]["m"]) == 3
    assert last.attrs["axis"] == 1 and graph.outputs[0].type.dtype == DataType.INT32
    scales = model.fc.act_scale * np.asarray(model.fc.weight_scale)
    assert graph.outputs[0].scale == pytest.approx(scales.max())


def test_free_bits_sets_the_width_of_tensors_no_layer_dictates():
    graph, _, _ = lowered(Residual(), "conv0=4/4,conv1=4/4,conv2=4/4,fc=4/4", (2, 6, 6))
    assert node(graph, mico_ops.ADD).output.qformat.bits == 4  # the plan's widest activation
    assert mico_ops.REQUANT not in ops(graph)
    graph, _, _ = lowered(
        Residual(), "conv0=4/4,conv1=4/4,conv2=4/4,fc=4/4", (2, 6, 6), free_bits=7
    )
    assert node(graph, mico_ops.ADD).output.qformat.bits == 7
    with pytest.raises(CompileError, match="free_bits must be from 1 to 8"):
        lowered(Residual(), "conv0=4/4,conv1=4/4,conv2=4/4,fc=4/4", (2, 6, 6), free_bits=9)


# ----------------------------------------------------------------------------- errors
def test_unfolded_batchnorm_asks_to_fuse():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8, 2))  # fmt: skip
    with pytest.raises(CompileError, match=r"batch_norm.*mico\.quant\.fuse_model"):
        lowered(model, "0=8/8,4=8/8", (1, 4, 4))


def test_dynamic_activations_are_rejected():
    with pytest.raises(CompileError, match=r"layer 'conv0' .* dynamically.*act_mode='static'"):
        lowered(Residual(), "conv0=8/8,conv1=8/8,conv2=8/8,fc=8/8", (2, 6, 6),
                QuantConfig(act_mode="dynamic"))  # fmt: skip


def test_unsupported_op_is_named():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return torch.log_softmax(self.fc(x), dim=-1)

    with pytest.raises(UnsupportedOpError, match=r"aten\.log_softmax\.int at 'log_softmax'"):
        lowered(Net(), "fc=8/8", (4,))


def test_layer_left_out_of_the_plan_is_named():
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2))
    batches = [torch.randn(8, 4)]
    quantize_model(model[0], "0=8/8", QuantConfig(act_mode="static"), batches[0])
    calibrate(model.eval(), batches)
    ir = extract_ir(model, torch.zeros(1, 4))
    with pytest.raises(CompileError, match=r"weight '1\.weight'\) is not quantized"):
        lower_static(ir, batches)


def test_accumulator_overflow_is_a_compile_error():
    model = nn.Sequential(nn.Linear(140_000, 1))  # 140000 * 127 * 127 > 2**31
    with pytest.raises(CompileError, match=r"layer '0' .* overflow its int32 accumulator.*fan-in"):
        lowered(model, "0=8/8", (140_000,))


def test_bias_too_large_for_the_accumulator_is_saturated_with_a_warning():
    """A bias of 1e6 at an accumulator scale near 1e-4 needs 1e10 units: int32 cannot hold it.
    It is saturated, leaving room for the products, and the reference computes that bias."""
    model = nn.Sequential(nn.Linear(4, 2))
    with torch.no_grad():
        model[0].bias.copy_(torch.tensor([1e6, -3.0]))
    with pytest.warns(UserWarning, match=r"layer '0'.*bias is saturated to \+-(\d+)") as record:
        graph, _, batches = lowered(model, "0=8/8", (4,))
    limit = 2**31 - 1 - 4 * 127 * 127
    assert f"+-{limit}" in str(record[0].message)
    layer = node(graph, mico_ops.QLINEAR)
    bias = np.asarray(layer.inputs[2].data)
    assert bias[0] == limit and abs(bias[1]) < limit
    out = run_graph(graph, batches[0])[0]
    assert out.dtype == torch.int64 and int(out[:, 0].min()) > limit - 4 * 127 * 127 - 1


@pytest.mark.parametrize("include_pad", [True, False])
def test_average_pooling_tracks_pytorch(include_pad):
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.conv1d = nn.Conv1d(4, 3, 1)
            self.fc = nn.Linear(3 * 3, 2)

        def forward(self, x):
            y = F.avg_pool2d(F.relu(self.conv(x)), 3, 2, 1, count_include_pad=include_pad)
            y = F.adaptive_avg_pool2d(y, (1, 3)).flatten(2)  # divisible: a 3x1 average pool
            return self.fc(F.avg_pool1d(self.conv1d(y), 1).flatten(1))

    graph, model, _ = lowered(Net(), "conv=8/8,conv1d=8/8,fc=8/8", (2, 6, 6))
    assert ops(graph).count(mico_ops.AVGPOOL2D) == 3
    x = torch.randn(8, 2, 6, 6)
    real = run_graph(graph, x)[0].numpy() * graph.outputs[0].scale
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(real - expected).max() < 0.05 * np.abs(expected).max()
