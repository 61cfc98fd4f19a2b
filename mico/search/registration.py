"""The searchers' entries in the module registry (category ``searcher``), loaded by
:func:`mico.registry.builtin.load_builtin`."""

from __future__ import annotations

from typing import Any


def register(registry: Any) -> None:
    from mico.search.searchers import NLPSearcher, RandomSearcher

    for cls, name, tags in (
        (RandomSearcher, "random", ["sampling", "baseline"]),
        (NLPSearcher, "nlp", ["sensitivity", "integer-program", "milp"]),
    ):
        if registry.get_module(name) is None:
            registry.add(cls, name, "searcher", author="mico", tags=tags,
                         hardware_support=["host", "rv32", "rv64", "bitfusion"])  # fmt: skip
