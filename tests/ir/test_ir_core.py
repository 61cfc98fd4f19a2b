import numpy as np
import pytest

from mico.errors import RegistryError, UnsupportedOpError
from mico.ir import DataType, Graph, Node, OpRegistry, TensorType, Value
from mico.ir.ops import get_conversion_fn, get_execution_fn, register_executor, register_op


def test_datatypes():
    assert DataType.int(4).container_bytes == 1
    assert DataType.uint(1).ctype == "uint8_t"
    assert DataType.int(3).ctype == "int8_t"
    assert DataType.INT32.ctype == "int32_t" and DataType.INT32.container_bytes == 4
    assert DataType.FP32.ctype == "float" and DataType.FP32.is_float
    assert str(DataType.uint(5)) == "uint5"
    assert DataType.int(4) == DataType("int", 4)
    assert DataType.int(4).numpy() == np.int8
    with pytest.raises(ValueError):
        DataType("complex", 64)


def test_tensor_type():
    t = TensorType((1, 8, 4, 4), DataType.uint(4))
    assert t.numel == 128 and t.nbytes == 128
    assert TensorType((2, 3), DataType.INT32).nbytes == 24
    assert str(t) == "uint4[1, 8, 4, 4]"
    with pytest.raises(ValueError):
        TensorType((-1, 3), DataType.FP32)


def test_graph_validate_catches_use_before_definition():
    x = Value("x", TensorType((1, 4), DataType.FP32))
    y = Value("y", TensorType((1, 4), DataType.FP32))
    z = Value("z", TensorType((1, 4), DataType.FP32))
    g = Graph("g", inputs=[x], outputs=[z])
    g.add(Node("b", "aten.relu.default", [y], [z]))
    g.add(Node("a", "aten.relu.default", [x], [y]))
    with pytest.raises(ValueError, match="uses %y before it is defined"):
        g.validate()
    g.nodes.reverse()
    assert g.validate() is g
    assert g.consumers(y)[0].name == "b"
    assert "aten.relu.default" in str(g)


def test_registry_rules_duplicates_and_scoping():
    with OpRegistry.scoped():

        @register_executor("test.double")
        def double(inputs, attrs):
            return [inputs[0] * 2]

        assert get_execution_fn("test.double") is double
        assert get_conversion_fn("test.double") is None
        with pytest.raises(RegistryError, match=r"already has a .execute. rule.*override=True"):
            register_executor("test.double")(lambda i, a: i)
        register_executor("test.double", override=True)(lambda i, a: i)
        assert get_execution_fn("test.double") is not double

        @register_op("test.double")
        def convert(info):
            return info

        assert get_conversion_fn("test.double") is convert
        with pytest.raises(RegistryError, match="unknown rule 'lower'"):
            OpRegistry.attach("test.double", "lower", convert)
        with pytest.raises(RegistryError, match="non-empty string"):
            OpRegistry.define("")
    assert not OpRegistry.is_registered("test.double")  # the scope restored the registry


def test_require_names_op_rule_and_fix():
    with pytest.raises(UnsupportedOpError, match=r"op 'nope\.op' has no emit rule; add one"):
        OpRegistry.require("nope.op", "emit", "add one")


def test_builtin_mico_ops_have_execute_and_emit_rules():
    import mico.codegen  # noqa: F401  (attaches emit rules)
    from mico.ir.ops import mico_ops

    for op in (
        mico_ops.QUANTIZE,
        mico_ops.QCONV2D,
        mico_ops.QLINEAR,
        mico_ops.MAXPOOL2D,
        mico_ops.RESHAPE,
    ):
        assert OpRegistry.rule(op, "execute") is not None
        assert OpRegistry.rule(op, "emit") is not None
