"""Type deduction of the op library: errors, symbolic dims, and the lowered mico.* graph."""

import pytest
import torch

from mico import ir
from mico.errors import TypeDeductionError
from mico.ir import DataType, OpRegistry, SymbolicDim, TensorType, TileType, Var

F32 = DataType.FP32


def v(shape, dtype=F32, cls=TensorType):
    return Var("v", cls(dtype, list(shape)))


def infer(name, *args, **attrs):
    return ir.create_op_call(name, list(args), **attrs).type


def test_elementwise_promotes_and_broadcasts():
    assert infer("tensor.mul", v([4, 1], DataType.INT8), v([3], DataType.UINT8)) == TensorType(
        DataType.INT8, [4, 3]
    )
    assert infer(
        "tile.div", v([16, 1], DataType.FP16, TileType), v([16], DataType.BF16, TileType)
    ) == (TileType(F32, [16, 16]))
    with pytest.raises(TypeDeductionError, match=r"^TensorAdd: incompatible shapes.*8 vs 5"):
        infer("tensor.add", v([4, 8]), v([5]))
    with pytest.raises(TypeDeductionError, match="TensorSub: bool operands are not supported"):
        infer("tensor.sub", v([2], DataType.BOOL), v([2], DataType.BOOL))
    with pytest.raises(TypeDeductionError, match="cannot promote bool with fp32"):
        infer("tensor.concat", v([2], DataType.BOOL), v([2]), dim=0)


def test_symbolic_dims_flow_through_ops():
    n = SymbolicDim("n")
    x = v([n, 3, 8, 8])
    y = infer("tensor.conv2d", x, v([4, 3, 3, 3]), padding=1)
    assert y.shape == (n, 4, 8, 8)
    pooled = infer("tensor.max_pool2d", y, kernel_size=2)
    assert pooled.shape == (n, 4, 4, 4)
    flat = infer("tensor.flatten", pooled, start_dim=1)
    assert flat.shape == (n, 64)
    assert infer("tensor.reshape", flat, shape=[n, -1]).shape == (n, 64)
    assert infer("tensor.reshape", flat, shape=[n, 8, 8]).shape == (n, 8, 8)
    with pytest.raises(TypeDeductionError, match="cannot reshape"):
        infer("tensor.reshape", flat, shape=[n, 7])
    out = infer("tensor.matmul", flat, v([64, 10]))
    assert out.shape == (n, 10)
    # a derived size is the same symbol each time it is deduced
    all_flat = infer("tensor.flatten", pooled)
    assert isinstance(all_flat.shape[0], SymbolicDim)
    assert infer("tensor.flatten", pooled) == all_flat
    # an unknown spatial size gives a derived symbol, not a guess
    h = SymbolicDim("h")
    z = infer("tensor.conv2d", v([1, 3, h, 8]), v([4, 3, 3, 3]))
    assert isinstance(z.shape[2], SymbolicDim) and z.shape[3] == 6
    assert infer("tensor.sum", x, dims=[2, 3]).shape == (n, 3)
    assert infer("tensor.concat", x, x, dim=1).shape == (n, 6, 8, 8)


def test_shape_errors_name_the_problem():
    cases = [
        ("tensor.matmul", [v([2, 3]), v([4, 5])], {}, r"inner dimensions differ: .*3 vs 4"),
        ("tensor.matmul", [v([2, 2, 3]), v([3, 3, 5])], {}, "batch dimensions do not broadcast"),
        (
            "tensor.conv2d",
            [v([1, 3, 8, 8]), v([4, 2, 3, 3])],
            {},
            r"input has 3 channels but the weight expects 2 x groups=1",
        ),
        (
            "tensor.conv2d",
            [v([1, 4, 8, 8]), v([3, 2, 3, 3])],
            {"groups": 2},
            "3 output channels are not divisible by groups=2",
        ),
        (
            "tensor.conv2d",
            [v([1, 3, 2, 2]), v([4, 3, 3, 3])],
            {},
            "window .* is larger than the padded input",
        ),
        (
            "tensor.conv2d",
            [v([1, 3, 8, 8]), v([4, 3, 3, 3])],
            {"padding": "same", "stride": 2},
            "padding='same' is not supported for strided",
        ),
        ("tensor.conv2d", [v([1, 3, 8, 8]), v([4, 3, 3, 3]), v([5])], {}, r"bias must be \[4\]"),
        (
            "tensor.conv1d",
            [v([1, 3, 8], DataType.INT8), v([4, 3, 3], DataType.INT8)],
            {},
            "must be a floating-point tensor",
        ),
        (
            "tensor.max_pool2d",
            [v([1, 1, 4, 4])],
            {"kernel_size": 2, "padding": 2},
            "padding 2 is more than half the kernel size 2",
        ),
        ("tensor.sum", [v([2, 3])], {"dims": [0, -2]}, r"repeats a dimension"),
        ("tensor.sum", [v([2, 3])], {"dims": 2}, "reduction dim 2 is out of range"),
        ("tensor.mean", [v([2], DataType.INT32)], {}, "floating-point"),
        ("tensor.softmax", [v([2, 3])], {"dim": 2}, "dim 2 is out of range for a tensor of rank 2"),
        ("tensor.reshape", [v([2, 3])], {"shape": [-1, -1]}, "only one dimension can be -1"),
        ("tensor.reshape", [v([2, 3])], {"shape": [4, -1]}, "6 is not divisible by 4"),
        ("tensor.reshape", [v([2, 3])], {"shape": [4, 2]}, r"cannot reshape fp32\[2, 3\]"),
        ("tensor.flatten", [v([2, 3, 4])], {"start_dim": 2, "end_dim": 1}, "comes after"),
        ("tensor.concat", [v([2, 3]), v([2, 4])], {"dim": 0}, "tensor 0 has 3 and tensor 1 has 4"),
        ("tensor.sigmoid", [v([2], DataType.INT8)], {}, "floating-point"),
    ]
    for name, args, attrs, message in cases:
        with pytest.raises(TypeDeductionError, match=message):
            ir.create_op_call(name, args, attrs=attrs)


def test_matmul_and_reduction_shapes_match_torch():
    for a, b in [
        ([3], [3]),
        ([3], [3, 4]),
        ([2, 3], [3]),
        ([5, 1, 2, 3], [4, 3, 2]),
        ([2, 3], [3, 4]),
    ]:
        ref = torch.matmul(torch.ones(a), torch.ones(b)).shape
        assert infer("tensor.matmul", v(a), v(b)).shape == tuple(ref)
    x = v([2, 3, 4])
    assert infer("tensor.max", x, dims=-1, keepdim=True).shape == (2, 3, 1)
    assert infer("tensor.sum", v([2], DataType.UINT8)).dtype == DataType.INT64
    assert infer("tensor.sum", v([2], DataType.BOOL)).dtype == DataType.INT64
    assert infer("tensor.cast", x, dtype=DataType.INT4).dtype == DataType.INT4
    assert infer("tensor.transpose", x, dim0=0, dim1=-1).shape == (4, 3, 2)
    assert infer("tensor.adaptive_avg_pool2d", x, output_size=[None, 1]).shape == (2, 3, 1)


@pytest.mark.parametrize("plan", ["conv1=8/8,conv2=4/4,fc=4/8", "conv1=3/5,conv2=1/2,fc=7/1"])
def test_mico_op_infer_rules_agree_with_the_lowered_graph(plan):
    from mico.models import SmallCNN
    from mico.pipeline import lower_model, quantize_ptq
    from mico.quant import QuantPlan

    torch.manual_seed(0)  # an untrained model: the types do not depend on the weights
    batches = [torch.rand(16, 1, 8, 8) for _ in range(2)]
    quantized = quantize_ptq(SmallCNN(channels=(4, 8)), QuantPlan.parse(plan), batches)
    graph = lower_model(quantized, torch.zeros(1, 1, 8, 8), "cnn")
    assert len(graph.nodes) == 7
    for node in graph.nodes:
        assert OpRegistry.infer(node.op, node.inputs, node.attrs) == node.output.type, node.name
    conv = next(n for n in graph.nodes if n.op == "mico.qconv2d")
    with pytest.raises(TypeDeductionError, match="MicoQconv2d: attribute 'groups' must be int"):
        OpRegistry.infer(conv.op, conv.inputs, {**conv.attrs, "groups": "1"})
    with pytest.raises(TypeDeductionError, match="MicoQconv2d: the bias must be int32"):
        OpRegistry.infer(conv.op, [conv.inputs[0], conv.inputs[1], conv.inputs[0]], conv.attrs)
