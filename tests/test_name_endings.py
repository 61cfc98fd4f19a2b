"""Names checked by a pattern refuse a trailing newline: a regular expression's ``$`` matches
before a final "\\n", so "A\\n" had passed the model-name check (found by the hypothesis test of
``tests/test_atomic.py``) and would have reached the C sources and file names."""

from __future__ import annotations

import pytest

from mico.codegen.project import check_model_name
from mico.errors import CompileError, RegistryError
from mico.registry.modules import ModuleRegistry


@pytest.mark.parametrize("name", ["A\n", "model\n", "net_1\n"])
def test_model_name_with_a_trailing_newline_is_refused(name):
    with pytest.raises(CompileError, match="not a C identifier"):
        check_model_name(name)
    check_model_name(name.rstrip("\n"))  # the same name without it is fine


def test_module_name_with_a_trailing_newline_is_refused():
    class Block:
        pass

    with pytest.raises(RegistryError, match="module name"):
        ModuleRegistry.add(Block, "block\n", "layer")
