"""The fluent operator registry (seed 002) on top of mico's one op registry."""

from typing import Literal

import pytest

from mico import ir
from mico.errors import RegistryError, TypeDeductionError
from mico.ir import DataType, OpRegistry, ScalarType, TensorType, TileType, Var
from mico.ir.graph import Value

F32 = DataType.FP32


def tensor(name="x", shape=(2, 3), dtype=F32):
    return Var(name, TensorType(dtype, list(shape)))


def tile(name="t", shape=(2, 3), dtype=F32):
    return Var(name, TileType(dtype, list(shape)))


def scalar(name="s", dtype=F32):
    return Var(name, ScalarType(dtype))


def identity(args):
    return args[0].type


def full(name, **kwargs):
    """A complete registration chain for a one-tensor op."""
    return (
        OpRegistry.register(name, **kwargs)
        .set_op_category("TestOp")
        .set_description("a test op")
        .add_argument("x", "input (TensorType)")
    )


def test_duplicate_registration_needs_override():
    with OpRegistry.scoped():
        with pytest.raises(RegistryError, match=r"'tensor.add' is already registered.*override"):
            OpRegistry.register("tensor.add")
        full("test.op").f_deduce_type(identity)
        with pytest.raises(RegistryError, match="already registered"):
            full("test.op")
        full("test.op", override=True).f_deduce_type(lambda args: ScalarType(F32))
        assert ir.create_op_call("test.op", [tensor()]).type == ScalarType(F32)
        # override replaces the signature too (and keeps the other rules)
        execute = OpRegistry.rule("tensor.add", "execute")
        (
            OpRegistry.register("tensor.add", override=True)
            .set_op_category("TensorOp")
            .set_description("addition, redefined")
            .add_argument("only", "one tensor (TensorType)")
            .f_deduce_type(identity)
        )
        assert len(ir.get_op("tensor.add").arguments) == 1
        assert OpRegistry.rule("tensor.add", "execute") is execute
    # the scope restored everything the builder changed
    op = ir.get_op("tensor.add")
    assert [a.name for a in op.arguments] == [
        "lhs",
        "rhs",
    ] and "with broadcasting" in op.description
    assert not ir.is_op_registered("test.op")
    x = tensor()
    assert ir.create_op_call("tensor.add", [x, x]).type == x.type


def test_missing_fields_fail_at_registration_and_flag_the_op():
    with OpRegistry.scoped():
        no_category = OpRegistry.register("test.nocat").set_description("d").add_argument("x")
        with pytest.raises(RegistryError, match=r"'test.nocat' is incomplete.*set_op_category"):
            no_category.f_deduce_type(identity)
        with pytest.raises(RegistryError, match="set_description"):
            OpRegistry.register("test.nodesc").set_op_category("C").f_deduce_type(identity)
        with pytest.raises(RegistryError, match=r"registered but incomplete.*set_op_category"):
            ir.create_op_call("test.nocat", [tensor()])
        # a chain that never reached f_deduce_type: the op exists, flagged incomplete
        full("test.unfinished")
        assert ir.is_op_registered("test.unfinished")
        assert not ir.get_op("test.unfinished").is_complete
        with pytest.raises(RegistryError, match=r"incomplete.*never reached f_deduce_type"):
            ir.create_op_call("test.unfinished", [tensor()])
        assert "INCOMPLETE" in ir.describe("test.unfinished")
        # finishing it later (a new chain) is allowed: there is no infer rule yet
        full("test.unfinished").f_deduce_type(identity)
        assert ir.get_op("test.unfinished").is_complete
        # an op with rules but no type deduction at all
        OpRegistry.define("test.rules_only", "has only an execute rule")
        OpRegistry.attach("test.rules_only", "execute", lambda i, a: i)
        with pytest.raises(RegistryError, match=r"has no type deduction.*f_deduce_type"):
            ir.create_op_call("test.rules_only", [tensor()])
        with pytest.raises(RegistryError, match=r"not registered; did you mean 'tensor.add'"):
            ir.create_op_call("tensor.ad", [tensor()])


def test_builder_rejects_malformed_declarations():
    with OpRegistry.scoped():
        b = full("test.bad")
        with pytest.raises(RegistryError, match="already has an argument or attribute 'x'"):
            b.add_argument("x", "again")
        with pytest.raises(RegistryError, match="kind"):
            b.add_argument("y", "bad kind", kind=int)
        with pytest.raises(RegistryError, match="non-empty string"):
            b.set_op_category("")
        with pytest.raises(RegistryError, match="attribute 'n' has type"):
            b.add_attribute("n", "int")
        with pytest.raises(RegistryError, match="default 'a' of attribute 'm' is not int"):
            b.add_attribute("m", int, default="a")
        with pytest.raises(RegistryError, match="needs a callable"):
            b.f_deduce_type(42)
        with pytest.raises(RegistryError, match="takes \\(args\\) or \\(args, attrs\\)"):
            b.f_deduce_type(lambda: None)
        b.f_deduce_type(identity)
        with pytest.raises(RegistryError, match="is complete; call add_argument"):
            b.add_argument("late")
        v = OpRegistry.register("test.var").add_argument("xs", variadic=True)
        with pytest.raises(RegistryError, match="variadic argument must be the last"):
            v.add_argument("y")
        o = OpRegistry.register("test.opt").add_argument("a", optional=True)
        with pytest.raises(RegistryError, match="required argument 'b' follows an optional"):
            o.add_argument("b")


def test_arity_and_kinds_are_checked_centrally_before_deduce():
    calls = []

    def deduce(args):
        calls.append(args)
        return args[0].type

    with OpRegistry.scoped():
        (
            OpRegistry.register("test.three")
            .set_op_category("TestOp")
            .set_description("three kinds")
            .add_argument("a", "a tensor (TensorType)")
            .add_argument("b", "a tile", kind=TileType)
            .add_argument("c", "a scalar or a tensor", kind=("ScalarType", TensorType))
            .add_argument("d", "anything", optional=True)
            .f_deduce_type(deduce)
        )
        x, t, s = tensor(), tile(), scalar()
        assert ir.create_op_call("test.three", [x, t, s]).type == x.type
        assert ir.create_op_call("test.three", [x, t, x, t]).type == x.type
        bad = {
            (x,): "Operator 'test.three' expects 3 to 4 arguments, got 1",
            (t, t, s): "TestThree: first argument must be a TensorType, got TileType",
            (x, x, s): "TestThree: second argument must be a TileType, got TensorType",
            (x, t, t): "TestThree: third argument must be a ScalarType or TensorType, got TileType",
            (x, t, 3): "TestThree: third argument must be a ScalarType or TensorType, "
            "got int (not an IR expression)",
        }
        for args, message in bad.items():
            with pytest.raises(TypeDeductionError) as info:
                ir.create_op_call("test.three", list(args))
            assert str(info.value) == message
        assert len(calls) == 2  # the deduce function never saw a bad call
    messages = {
        "tensor.relu": (2, "Operator 'tensor.relu' expects 1 argument, got 2"),
        "tensor.add": (3, "Operator 'tensor.add' expects 2 arguments, got 3"),
        "tensor.concat": (0, "Operator 'tensor.concat' expects at least 1 argument, got 0"),
    }
    for name, (n, message) in messages.items():
        with pytest.raises(TypeDeductionError) as info:
            ir.create_op_call(name, [tensor()] * n)
        assert str(info.value) == message
    with pytest.raises(
        TypeError, match=r"^TileAdd: second argument must be a TileType, got Tensor"
    ):
        ir.create_op_call("tile.add", [tile(), tensor()])
    with pytest.raises(TypeError, match=r"^TensorMaxPool2d: first argument must be a TensorType"):
        ir.create_op_call("tensor.max_pool2d", [tile()], kernel_size=2)


def test_kind_is_parsed_from_the_description():
    op = ir.get_op("tensor.add")
    assert [a.kind for a in op.arguments] == [(TensorType,), (TensorType,)]
    assert ir.get_op("tile.mul").arguments[0].kind == (TileType,)
    with OpRegistry.scoped():
        (
            OpRegistry.register("test.kinds")
            .set_op_category("TestOp")
            .set_description("d")
            .add_argument("a", "either (TensorType or TileType)")
            .add_argument("b", "no kind given")
            .f_deduce_type(identity)
        )
        a, b = ir.get_op("test.kinds").arguments
        assert a.kind == (TensorType, TileType) and a.kind_name == "TensorType or TileType"
        assert b.kind is None and b.kind_name == "any"


def test_typed_attributes():
    with OpRegistry.scoped():
        (
            full("test.attrs")
            .add_attribute("dim", int, description="required int")
            .add_attribute("scale", float, 1.0)
            .add_attribute("sizes", list[int], [1, 2])
            .add_attribute("mode", Literal["a", "b"], "a")
            .add_attribute("dtype", DataType | None, None)
            .f_deduce_type(lambda args, attrs: TensorType(attrs["dtype"] or F32, [attrs["dim"]]))
        )
        x = tensor()
        call = ir.create_op_call("test.attrs", [x], attrs={"dim": 3}, scale=2)
        assert call.attrs == {"dim": 3, "scale": 2, "sizes": [1, 2], "mode": "a", "dtype": None}
        assert call.type == TensorType(F32, [3])
        call = ir.create_op_call("test.attrs", [x], dim=1, dtype=DataType.INT8)
        assert call.type.dtype == DataType.INT8
        # defaults are copies: mutating one call's attrs does not change the next
        call.attrs["sizes"].append(9)
        assert ir.create_op_call("test.attrs", [x], dim=1).attrs["sizes"] == [1, 2]
        wrong = {
            "dim": ("x", "TestAttrs: attribute 'dim' must be int, got str 'x'"),
            "scale": ("big", "TestAttrs: attribute 'scale' must be float, got str 'big'"),
            "sizes": ([1, "2"], "TestAttrs: attribute 'sizes' must be list[int], got list"),
            "mode": ("c", "TestAttrs: attribute 'mode' must be 'a' | 'b', got str 'c'"),
            "dtype": ("fp32", "TestAttrs: attribute 'dtype' must be DataType | None, got str"),
        }
        for attr, (value, message) in wrong.items():
            attrs = {"dim": 1, attr: value}
            with pytest.raises(TypeDeductionError, match="^" + message.replace("[", r"\[")):
                ir.create_op_call("test.attrs", [x], attrs=attrs)
        with pytest.raises(TypeDeductionError, match="attribute 'dim' must be int, got bool"):
            ir.create_op_call("test.attrs", [x], dim=True)
        with pytest.raises(TypeDeductionError, match="missing required attribute 'dim' \\(int\\)"):
            ir.create_op_call("test.attrs", [x])
        with pytest.raises(TypeDeductionError, match=r"unknown attribute 'dims'.*dim, scale"):
            ir.create_op_call("test.attrs", [x], dims=1)
    with pytest.raises(TypeDeductionError, match="attribute 'dim' must be int"):
        ir.create_op_call("tensor.softmax", [tensor()], dim="1")


def test_deduce_results_are_checked():
    with OpRegistry.scoped():
        full("test.broken").f_deduce_type(lambda args: "fp32")
        with pytest.raises(TypeDeductionError, match="returned 'fp32', not an IR type"):
            ir.create_op_call("test.broken", [tensor()])


def test_get_op_list_search_describe():
    op = ir.get_op("tensor.softmax")
    assert (op.name, op.category) == ("tensor.softmax", "TensorOp")
    assert "Softmax" in op.description
    assert [a.name for a in op.arguments] == ["input"]
    assert [(a.name, a.type, a.default) for a in op.attributes] == [("dim", int, -1)]
    assert op.display_name == "TensorSoftmax" and op.is_complete
    everything = ir.list_ops()
    assert everything == sorted(everything) and "mico.qconv2d" in everything
    assert ir.list_ops("TileOp") == ["tile.add", "tile.div", "tile.mul", "tile.sub"]
    assert ir.list_ops(category="tensorop")[:2] == ["tensor.adaptive_avg_pool2d", "tensor.add"]
    assert set(ir.list_ops("MicoOp")) == {
        "mico.bit_conv1d",
        "mico.bit_conv2d",
        "mico.bit_linear",
        "mico.maxpool2d",
        "mico.qconv2d",
        "mico.qlinear",
        "mico.quantize",
        "mico.reshape",
    }

    # once mico.codegen is imported, ATen ops carry C emit rules and show up in searches too
    def own(names: list[str]) -> list[str]:
        return [n for n in names if not n.startswith("aten.")]

    assert own(ir.search("add"))[:3] == ["scalar.add", "tensor.add", "tile.add"]
    assert ir.search("tensor.add")[0] == "tensor.add"
    assert set(own(ir.search("pool"))[:4]) == {
        "tensor.max_pool2d",
        "tensor.avg_pool2d",
        "tensor.adaptive_avg_pool2d",
        "mico.maxpool2d",
    }
    assert ir.search("tile division") == ["tile.div"]
    assert {"mico.qconv2d", "mico.qlinear"} <= set(ir.search("requantization"))
    assert own(ir.search("soft"))[0] == "tensor.softmax"  # name before description matches
    assert ir.search("no such thing") == [] and ir.search("  ") == []
    text = ir.describe("tensor.conv2d")
    lines = text.splitlines()
    assert lines[0] == "tensor.conv2d  [TensorOp]"
    assert "  arguments (2-3):" in lines
    assert any(line.strip().startswith("bias: TensorType (optional)") for line in lines)
    assert any(line.strip().startswith("groups: int = 1") for line in lines)
    assert lines[-1].startswith("  rules:") and "infer" in lines[-1] and "execute" in lines[-1]
    assert "+" in ir.describe("tensor.concat").splitlines()[2]  # "arguments (1+)"
    with pytest.raises(RegistryError, match=r"did you mean 'tensor.relu'"):
        ir.describe("tensor.rleu")


def test_existing_rule_api_and_infer_on_types_and_graph_values():
    import mico.codegen  # noqa: F401  (attaches emit rules)

    for name in ("mico.quantize", "mico.qconv2d", "mico.qlinear", "mico.maxpool2d"):
        rules = ir.get_op(name).rules
        assert {"execute", "emit", "infer"} <= set(rules), name
    t = TensorType((2, 3), F32)
    assert OpRegistry.infer("tensor.relu", [t]) == t
    assert OpRegistry.infer("tensor.add", [Value("v", t), t]) == t
    assert OpRegistry.rule("tensor.sum", "infer")([t], {"dims": 1}) == TensorType((2,), F32)
    assert ir.get_op("tensor.add").deduce.__qualname__ == "deduce_tensor_add"


def test_raw_infer_rules_still_work():
    with OpRegistry.scoped():
        OpRegistry.attach("test.raw", "infer", lambda args, attrs: args[0].type)
        x = tensor()
        assert ir.create_op_call("test.raw", [x, x, x], foo=1).type == x.type  # unchecked
        assert "signature: not declared" in ir.describe("test.raw")


def test_scoped_restores_the_registry_after_an_error():
    before = {name: dict(ir.get_op(name).rules) for name in ir.list_ops()}
    with pytest.raises(RuntimeError), OpRegistry.scoped():
        full("test.scoped").f_deduce_type(identity)
        OpRegistry.attach("tensor.add", "execute", lambda i, a: i, override=True)
        raise RuntimeError
    assert not ir.is_op_registered("test.scoped")
    after = {name: dict(ir.get_op(name).rules) for name in ir.list_ops()}
    assert after == before
