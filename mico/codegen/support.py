"""Which C modes run an op: the answer ``mico ops list`` shows and tests hold to.

The dynamic mode emits every ATen op (and quantized ``mico.bit_*`` layer) that has a C ``emit``
rule; the static (integer-only) mode runs the ops its lowering pass knows
(:data:`mico.passes.lower_static.KINDS`). An op is named with or without its ``.default``
overload.
"""

from __future__ import annotations

MODES = ("dynamic", "static")


def _overloads(name: str) -> tuple[str, ...]:
    return (name, f"{name}.default") if name.count(".") == 1 else (name,)


def c_modes(name: str) -> tuple[str, ...]:
    """The C modes that compile ``name`` (empty: neither, e.g. an internal or Python-only op)."""
    import mico.codegen  # noqa: F401  (attaches the C emit rules)
    from mico.ir import OpRegistry
    from mico.passes.lower_static import KINDS

    modes = []
    user_facing = name.startswith(("aten.", "mico.bit_"))
    if user_facing and OpRegistry.is_registered(name) and OpRegistry.rule(name, "emit"):
        modes.append("dynamic")
    if any(n in KINDS for n in _overloads(name)):
        modes.append("static")
    return tuple(modes)


def ops_by_mode() -> dict[str, list[str]]:
    """Every user-facing op each mode compiles, sorted."""
    from mico.ir import OpRegistry
    from mico.passes.lower_static import KINDS

    names = set(OpRegistry.names()) | set(KINDS)
    table: dict[str, list[str]] = {mode: [] for mode in MODES}
    for name in sorted(names):
        if name.startswith("mico.bit_") and name.endswith(".default"):
            continue  # listed once, under its short name
        for mode in c_modes(name):
            table[mode].append(name)
    return table
