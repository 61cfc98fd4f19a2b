"""Static (integer-only) lowering of what a LLaMa decoder adds to a ViT: patterns of ATen ops
recognised as a whole and lowered to one integer op each (:mod:`mico.ir.ops.llama_ops`).

``torch.export`` decomposes the zoo ``tinyllama`` into ATen ops that the static mode cannot run
one at a time (a float ``rsqrt``, broadcasts against float tables, a ``-1e9`` mask that would
ruin any scale calibrated across it). :func:`match_llama` finds them before the walk of
:mod:`mico.passes.lower_static` and returns a handler per anchor node; the other nodes of each
pattern are marked fused:

* ``aten.embedding(table, tokens)`` on the graph input -> ``mico.qembedding``: the table
  quantized once at ``free_bits`` to its own largest magnitude (or to the format of the layers
  that read it), stored packed;
* RMSNorm, ``x * rsqrt(mean(x.pow(2), -1, keepdim) + eps) [* weight]`` -> ``mico.qrmsnorm``;
* rotary embedding of interleaved pairs, ``unflatten(-1, (-1, 2))`` -> ``select`` 0/1 ->
  ``x0 * cos - x1 * sin``, ``x0 * sin + x1 * cos`` -> ``stack(-1)`` -> ``flatten(-2)`` ->
  ``mico.qrope`` with the constant cos/sin tables in Q14;
* an additive mask of zeros and large negatives before a softmax over the last dim, each row's
  kept columns a prefix (the causal mask) -> ``mico.qsoftmax_prefix``;
* the constant tables' ``slice`` / ``alias`` nodes, once every use is fused.

Anything close to a pattern but not it (another exponent, a mask that is not a prefix, tables
that differ between the two halves of a rotation) is left to the walk, which names the op it
cannot lower (an UnsupportedOpError), or refused here with the reason; never silently changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mico.errors import CompileError, UnsupportedOpError
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import llama_ops
from mico.ir.ops.mico_ops import code_range, out_spec
from mico.ir.types import TensorType
from mico.quant.arithmetic import QFormat, quantize

if TYPE_CHECKING:
    from mico.passes.lower_static import _StaticLowering

EMBEDDING = "aten.embedding.default"
#: ops that pass a constant through unchanged (or a slice of it)
CONST_CHAIN = ("aten.alias.default", "aten.clone.default", "aten.detach.default",
               "aten.contiguous.default", "aten.slice.Tensor")  # fmt: skip
#: ops that put the rotated pairs back into one dim
FLATTEN = ("aten.flatten.using_ints", "aten.view.default", "aten.reshape.default",
           "aten._unsafe_view.default")  # fmt: skip
#: a mask value at or below this is "masked out" (exp underflows to 0 in float32)
MASKED = -1e4
#: Q format of the rotary tables
ROPE_FRAC = 14
#: RMSNorm: pre-scale of codes before the square root, fraction bits of the normalised value
#: and of the weight
RMS_PRE, RMS_FRAC, RMS_GAIN_FRAC = 8, 16, 12

Handler = Callable[[Node], None]


def token_input(ir: Graph) -> bool:
    """True when the graph's one input is integer token ids read only by embeddings."""
    if len(ir.inputs) != 1 or ir.inputs[0].type.dtype.is_float:
        return False
    x = ir.inputs[0]
    uses = [(n, i) for n in ir.nodes for i, v in enumerate(n.inputs) if v is x]
    return bool(uses) and all(n.op == EMBEDDING and i == 1 for n, i in uses)


def _dim(d: Any, rank: int) -> int:
    d = int(d)
    return d + rank if d < 0 else d


class _Matcher:
    def __init__(self, low: _StaticLowering) -> None:
        self.low = low
        self.handlers: dict[int, Handler] = {}

    # ----------------------------------------------------------------- helpers
    def users(self, value: Value) -> list[Node]:
        return [n for n, _ in self.low.users_of(value)]

    def only_user(self, value: Value, op: str | tuple[str, ...]) -> Node | None:
        users = self.users(value)
        ops = (op,) if isinstance(op, str) else op
        if len(users) == 1 and users[0].op in ops and id(value) not in self.low.outputs:
            return users[0]
        return None

    def const(self, value: Value) -> np.ndarray | None:
        """The constant data of ``value`` (a parameter or buffer, maybe sliced), or None."""
        if any(value is v for v in self.low.src.inputs):
            return None
        node = value.producer
        if node is None:
            try:
                return self.low.tensor(value).to(torch.float64).numpy()
            except CompileError:
                return None
        if node.op not in CONST_CHAIN or not node.inputs:
            return None
        data = self.const(node.inputs[0])
        if data is None or node.op != "aten.slice.Tensor":
            return data
        a = node.attrs
        dim = _dim(a.get("dim", 0), data.ndim)
        index = [slice(None)] * data.ndim
        index[dim] = slice(a.get("start"), a.get("end"), int(a.get("step", 1) or 1))
        return data[tuple(index)]

    def fuse(self, *nodes: Node) -> None:
        for n in nodes:
            self.low.fused.add(id(n))

    # ----------------------------------------------------------------- matching
    def run(self) -> dict[int, Handler]:
        for node in self.low.src.nodes:
            if node.op == EMBEDDING:
                self.embedding(node)
            elif node.op == "aten.pow.Tensor_Scalar":
                self.rmsnorm(node)
            elif node.op == "aten.unflatten.int":
                self.rope(node)
            elif node.op in ("aten.add.Tensor", "aten.add_.Tensor"):
                self.masked_softmax(node)
        for node in reversed(self.low.src.nodes):  # constant tables every use of which is fused
            if (
                node.op in CONST_CHAIN
                and self.const(node.output) is not None
                and id(node.output) not in self.low.outputs
                and all(id(u) in self.low.fused for u in self.users(node.output))
            ):
                self.fuse(node)
        return self.handlers

    def embedding(self, node: Node) -> None:
        table_v, ids = node.inputs[0], node.inputs[1]
        if not any(ids is v for v in self.low.src.inputs):
            raise UnsupportedOpError(
                f"embedding at '{node.name}' looks up computed indices; the static C backend "
                "takes token ids only from the model input"
            )
        table = self.low.tensor(table_v).to(torch.float32).numpy()
        hard, _ = self.low.demands(node.output)
        if hard:
            fmt, scale = self.low.pref(node.output)
        else:
            fmt = QFormat(self.low.free_bits, bool((table < 0).any()))
            amax = float(np.abs(table).max()) if table.size else 0.0
            scale = amax / fmt.qmax if amax > 0 else 1.0
        self.low._prefs[id(node.output)] = (fmt, scale)
        codes = quantize(table, scale, fmt).astype(np.int64)

        def lower(n: Node) -> None:
            low = self.low
            t = Value(low.fresh(f"{table_v.name}_codes"),
                      TensorType(tuple(codes.shape), low_codes_dtype(fmt)), data=codes,
                      qformat=fmt, scale=scale)  # fmt: skip
            out = low.codes_value(n.output.name, n.output.type.shape, (fmt, scale))
            low.env[id(n.output)] = low.emit(n.name, llama_ops.QEMBEDDING,
                                             [low.env[id(ids)], t], out, {})  # fmt: skip

        self.handlers[id(node)] = lower

    def rmsnorm(self, pow_node: Node) -> None:
        if float(pow_node.attrs.get("exponent", 0)) != 2.0:
            return
        x = pow_node.inputs[0]
        rank = len(x.type.shape)
        mean = self.only_user(pow_node.output, "aten.mean.dim")
        if mean is None or not mean.attrs.get("keepdim"):
            return
        if [_dim(d, rank) for d in (mean.attrs.get("dim") or [])] != [rank - 1]:
            return
        add = self.only_user(mean.output, ("aten.add.Tensor", "aten.add_.Tensor"))
        if add is None or len(add.inputs) != 1:
            return
        eps = add.attrs.get("other")
        if not isinstance(eps, int | float) or eps < 0 or add.attrs.get("alpha", 1) != 1:
            return
        rsqrt = self.only_user(add.output, "aten.rsqrt.default")
        if rsqrt is None:
            return
        mul = self.only_user(rsqrt.output, "aten.mul.Tensor")
        if mul is None or len(mul.inputs) != 2 or not any(v is x for v in mul.inputs):
            return
        n = int(x.type.shape[-1])
        nodes = [pow_node, mean, add, rsqrt, mul]
        result, weight = mul.output, np.ones(n)
        scale_mul = self.only_user(mul.output, "aten.mul.Tensor")
        if scale_mul is not None and len(scale_mul.inputs) == 2:
            other = [v for v in scale_mul.inputs if v is not mul.output]
            data = self.const(other[0]) if len(other) == 1 else None
            if data is not None and data.size == n and data.shape[-1:] == (n,):
                weight = data.reshape(n)
                nodes.append(scale_mul)
                result = scale_mul.output
        self.fuse(*nodes[1:])

        def lower(node: Node) -> None:
            self.lower_rmsnorm(node, x, result, float(eps), weight)

        self.handlers[id(pow_node)] = lower

    def lower_rmsnorm(
        self, node: Node, src: Value, result: Value, eps: float, weight: np.ndarray
    ) -> None:
        low = self.low
        where = f"RMSNorm at '{node.name}' (pow, mean, rsqrt, mul)"
        x = low.codes(src, where)
        fmt_in = x.qformat
        assert fmt_in is not None
        s = x.scale or 1.0
        n = int(src.type.shape[-1])
        fmt, s_out = low.pref(result)
        attrs = rmsnorm_attrs(n, s, eps, weight, fmt_in, fmt, s_out, where)
        out = low.codes_value(result.name, result.type.shape, (fmt, s_out))
        low.env[id(result)] = low.emit(node.name, llama_ops.QRMSNORM, [x], out, attrs)

    def rope(self, unflat: Node) -> None:
        src = unflat.inputs[0]
        rank = len(src.type.shape)
        out_rank = len(unflat.output.type.shape)
        if _dim(unflat.attrs.get("dim", 0), rank) != rank - 1 or unflat.output.type.shape[-1] != 2:
            return
        users = self.users(unflat.output)
        if len(users) != 2 or any(
            u.op != "aten.select.int" or _dim(u.attrs.get("dim", 0), out_rank) != out_rank - 1
            for u in users
        ):
            return
        by_index = {int(u.attrs.get("index", 0)) % 2: u for u in users}
        if len(by_index) != 2:
            return
        s0, s1 = by_index[0], by_index[1]
        # each half feeds two products with a constant table
        products: dict[int, tuple[int, np.ndarray, Node]] = {}
        for half, sel in ((0, s0), (1, s1)):
            muls = self.users(sel.output)
            if len(muls) != 2 or id(sel.output) in self.low.outputs:
                return
            for mul in muls:
                if mul.op != "aten.mul.Tensor" or len(mul.inputs) != 2:
                    return
                other = [v for v in mul.inputs if v is not sel.output]
                table = self.const(other[0]) if len(other) == 1 else None
                if table is None:
                    return
                products[id(mul)] = (half, table, mul)
        combine: dict[str, Node] = {}
        for _, _, mul in products.values():
            user = self.only_user(mul.output, ("aten.sub.Tensor", "aten.add.Tensor"))
            if user is None or user.attrs.get("alpha", 1) != 1 or len(user.inputs) != 2:
                return
            combine["sub" if user.op == "aten.sub.Tensor" else "add"] = user
        if set(combine) != {"sub", "add"}:
            return
        sub, add = combine["sub"], combine["add"]
        a, b = (products.get(id(v.producer)) if v.producer else None for v in sub.inputs)
        c, d = (products.get(id(v.producer)) if v.producer else None for v in add.inputs)
        if a is None or b is None or c is None or d is None:
            return
        if c[0] == 1:
            c, d = d, c
        if (a[0], b[0], c[0], d[0]) != (0, 1, 0, 1):
            return
        stack = self.only_user(sub.output, "aten.stack.default")
        if stack is None or self.only_user(add.output, "aten.stack.default") is not stack:
            return
        if [v.producer for v in stack.inputs] != [sub, add]:
            return
        if _dim(stack.attrs.get("dim", 0), out_rank) != out_rank - 1:
            return
        final = self.only_user(stack.output, FLATTEN)
        if final is None or tuple(final.output.type.shape) != tuple(src.type.shape):
            return
        positions, half = int(src.type.shape[-2]), int(src.type.shape[-1]) // 2
        tables = []
        for entry in (a, b, c, d):
            table = entry[1]
            if table.ndim > 2 and all(size == 1 for size in table.shape[:-2]):
                table = table.reshape(table.shape[-2:])
            try:
                tables.append(np.broadcast_to(table, (positions, half)))
            except ValueError:
                return
        cos, sin, sin2, cos2 = tables
        where = f"rotary embedding at '{unflat.name}'"
        if not (np.array_equal(cos, cos2) and np.array_equal(sin, sin2)):
            raise UnsupportedOpError(
                f"{where}: x0 * C - x1 * S and x0 * S' + x1 * C' use different tables (C != C' "
                "or S != S'); the static mode lowers a rotation (the same cos and sin in both)"
            )
        self.fuse(s0, s1, *(p[2] for p in products.values()), sub, add, stack, final)

        def lower(node: Node) -> None:
            self.lower_rope(node, src, final.output, cos, sin)

        self.handlers[id(unflat)] = lower

    def lower_rope(
        self, node: Node, src: Value, result: Value, cos: np.ndarray, sin: np.ndarray
    ) -> None:
        low = self.low
        where = f"rotary embedding at '{node.name}'"
        x = low.codes(src, where)
        fmt_in = x.qformat
        assert fmt_in is not None
        fmt, s_out = low.pref(result)
        attrs = rope_attrs(cos, sin, fmt_in, x.scale or 1.0, fmt, s_out, where)
        out = low.codes_value(result.name, result.type.shape, (fmt, s_out))
        low.env[id(result)] = low.emit(node.name, llama_ops.QROPE, [x], out, attrs)

    def masked_softmax(self, add: Node) -> None:
        if len(add.inputs) != 2 or add.attrs.get("alpha", 1) != 1:
            return
        consts = [self.const(v) for v in add.inputs]
        if (consts[0] is None) == (consts[1] is None):
            return
        mask = consts[0] if consts[0] is not None else consts[1]
        scores = add.inputs[1] if consts[0] is not None else add.inputs[0]
        assert mask is not None
        rank = len(add.output.type.shape)
        softmax = self.only_user(add.output, ("aten.softmax.int", "aten._softmax.default"))
        if softmax is None or _dim(softmax.attrs.get("dim", -1), rank) != rank - 1:
            return
        if tuple(scores.type.shape) != tuple(add.output.type.shape):
            return
        where = f"masked softmax at '{softmax.name}' (mask added at '{add.name}')"
        tq, tk = (int(d) for d in scores.type.shape[-2:])
        if mask.ndim > 2 and any(d != 1 for d in mask.shape[:-2]):
            raise UnsupportedOpError(
                f"{where}: the mask {mask.shape} differs between heads or samples; the static "
                "mode takes one (T, T) mask"
            )
        mask = np.broadcast_to(mask.reshape(mask.shape[-2:]) if mask.ndim > 2 else mask, (tq, tk))
        kept = mask == 0
        if not np.all(kept | (mask <= MASKED)):
            raise UnsupportedOpError(
                f"{where}: the additive mask holds values other than 0 and large negatives "
                f"(<= {MASKED:g}); the static mode lowers a mask that keeps or removes positions"
            )
        limits = kept.sum(axis=1)
        prefix = np.arange(tk)[None, :] < limits[:, None]
        if not np.array_equal(kept, prefix) or int(limits.min()) < 1:
            raise UnsupportedOpError(
                f"{where}: the kept positions of some row are not a non-empty prefix (a causal "
                "mask keeps columns 0..i of row i); the static mode lowers such masks only"
            )
        self.fuse(add)

        def lower(node: Node) -> None:
            self.lower_masked_softmax(node, scores, [int(v) for v in limits])

        self.handlers[id(softmax)] = lower

    def lower_masked_softmax(self, node: Node, scores: Value, limits: list[int]) -> None:
        low = self.low
        where = f"{node.op} at '{node.name}'"
        if node.attrs.get("half_to_float"):
            raise UnsupportedOpError(f"{where} converts half to float; not supported")
        x = low.codes(scores, where)
        fmt_in, s_in = x.qformat, x.scale or 1.0
        assert fmt_in is not None
        hard, _ = low.demands(node.output)
        bits = max((f[0].bits for f in hard), default=low.free_bits)
        fmt_out = QFormat(bits, False)
        out = low.codes_value(node.output.name, node.output.type.shape,
                              (fmt_out, 1.0 / fmt_out.qmax))  # fmt: skip
        attrs = prefix_softmax_attrs(fmt_in, s_in, bits, limits)
        low.env[id(node.output)] = low.emit(node.name, llama_ops.QSOFTMAX_PREFIX, [x], out, attrs)


def rmsnorm_attrs(
    n: int,
    s_in: float,
    eps: float,
    weight: np.ndarray,
    fmt_in: QFormat,
    fmt_out: QFormat,
    s_out: float,
    where: str,
) -> dict[str, Any]:
    """The ``mico.qrmsnorm`` attributes of an RMSNorm over ``n`` codes of scale ``s_in`` whose
    result is stored as ``fmt_out`` codes of scale ``s_out`` (see :mod:`mico.ir.ops.llama_ops`);
    a CompileError when the int64 arithmetic could overflow."""
    pre, frac, gfrac = RMS_PRE, RMS_FRAC, RMS_GAIN_FRAC
    k = round(math.sqrt(n) * 2**frac)
    g = [round(float(v)) for v in np.asarray(weight, dtype=np.float64) / s_out * 2**gfrac]
    a_max = max(abs(fmt_in.qmin), abs(fmt_in.qmax))
    g_max = max((abs(v) for v in g), default=0)
    if (
        (n * a_max * a_max) << (2 * pre) >= 2**62
        or (a_max << pre) * k >= 2**62
        or (k + 1) * g_max >= 2**62
        or g_max >= 2**31
    ):
        raise CompileError(
            f"{where}: the int64 fixed-point arithmetic could overflow ({n} channels of "
            f"{fmt_in} codes, weight / output scale up to {g_max / 2**gfrac:g}); the output "
            "scale is tiny next to the weight: calibrate on representative inputs"
        )
    return {
        "pre": pre,
        "eps_q": int(min(round(4**pre * n * eps / (s_in * s_in)), 2**62)),
        "k": int(k),
        "g": g,
        "shift": frac + gfrac,
        "clamp": list(code_range(fmt_out)),
        **({"binary": True} if fmt_out.binary else {}),  # the sign: 0 is no binary code
    }


def rope_attrs(
    cos: np.ndarray,
    sin: np.ndarray,
    fmt_in: QFormat,
    s_in: float,
    fmt_out: QFormat,
    s_out: float,
    where: str,
) -> dict[str, Any]:
    """The ``mico.qrope`` attributes: the (positions, half) tables in Q``ROPE_FRAC`` and the
    multiplier from their int32 products (scale ``s_in / 2**ROPE_FRAC``) to ``s_out``."""
    from mico.passes.lower_static import multiplier

    one = 2**ROPE_FRAC
    cos_q = np.floor(np.asarray(cos, dtype=np.float64) * one + 0.5).astype(np.int64)
    sin_q = np.floor(np.asarray(sin, dtype=np.float64) * one + 0.5).astype(np.int64)
    a_max = max(abs(fmt_in.qmin), abs(fmt_in.qmax))
    t_max = int(max(np.abs(cos_q).max(initial=0), np.abs(sin_q).max(initial=0)))
    if 2 * a_max * t_max > 2**31 - 1:
        raise CompileError(
            f"{where}: the int32 accumulator could overflow ({fmt_in} codes times tables up "
            f"to {t_max / one:g}); rotary tables are cos and sin, at most 1 in magnitude"
        )
    m, shift = multiplier(s_in / (one * s_out), where)
    return {
        "positions": int(cos_q.shape[0]),
        "half": int(cos_q.shape[1]),
        "cos": [int(v) for v in cos_q.ravel()],
        "sin": [int(v) for v in sin_q.ravel()],
        "out": out_spec(fmt_out, s_out, [m], [shift]),
    }


def prefix_softmax_attrs(fmt_in: QFormat, s_in: float, bits: int, limits: list[int]) -> dict:
    """The ``mico.qsoftmax_prefix`` attributes: ``exp(-d * s_in)`` in Q15 for every distance
    ``d`` of two ``fmt_in`` codes, unsigned ``bits``-bit probabilities (scale 1 / qmax)."""
    distances = np.arange(fmt_in.qmax - fmt_in.qmin + 1, dtype=np.float64)
    exp_q15 = np.maximum(np.floor(np.exp(-distances * s_in) * 2**15 + 0.5), 0)
    return {"exp_q15": [int(v) for v in exp_q15], "qmax": int(QFormat(bits, False).qmax),
            "limits": [int(v) for v in limits]}  # fmt: skip


def low_codes_dtype(fmt: QFormat) -> Any:
    from mico.passes.lower_static import codes_dtype

    return codes_dtype(fmt)


def match_llama(low: _StaticLowering) -> dict[int, Handler]:
    """Handlers (by anchor node id) of the LLaMa patterns in ``low``'s source graph; the
    other nodes of each pattern are added to ``low.fused``."""
    return _Matcher(low).run()
