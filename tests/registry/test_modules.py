"""ModuleRegistry: the seed 004 API, with each of the seed design's flaws fixed and tested."""

from __future__ import annotations

from typing import Literal, Optional, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from mico.errors import RegistryError
from mico.registry import ModuleRegistry, register_module


@pytest.fixture(autouse=True)
def scoped_registry():
    with ModuleRegistry.scoped():
        yield


class Attention(nn.Module):
    """Windowed attention.

    A second paragraph that is not the summary.
    """

    def __init__(
        self,
        hidden_dim: int,
        num_heads: int,
        window: Optional[int] = None,  # noqa: UP045 - the old spelling must validate too
        kind: Literal["flash", "naive"] = "flash",
        scale: Union[float, None] = 0.0,  # noqa: UP007
        sizes: list[int] | None = None,
        causal: bool = False,
        *args,
        device=None,
        **kwargs,
    ) -> None:
        super().__init__()


class Strict(nn.Module):
    def __init__(self, width: int, names: tuple[str, ...] = ()) -> None:
        super().__init__()


def test_register_list_get_and_alias_everywhere():
    register_module(
        "windowed", "attention", alias="win", tags=["Sliding-Window"], hardware_support=["host"]
    )(Attention)
    assert ModuleRegistry.get_module("windowed") is Attention
    assert ModuleRegistry.get_module("win") is Attention
    assert ModuleRegistry.get_module("nope") is None
    assert [m.name for m in ModuleRegistry.list_modules(category="attention")] == ["windowed"]
    # aliases resolve in validation too (the seed looked the alias up only in get_module)
    assert ModuleRegistry.validate_config("win", {"hidden_dim": 4, "num_heads": 2}) == []
    assert ModuleRegistry.get_metadata("win").name == "windowed"
    assert Attention._registry_metadata.summary == "Windowed attention."


def test_args_kwargs_and_device_are_not_required_fields():
    register_module("windowed", "attention")(Attention)
    schema = ModuleRegistry.get_metadata("windowed").config_schema
    assert list(schema) == ["hidden_dim", "num_heads", "window", "kind", "scale", "sizes", "causal"]
    assert schema.accepts_extra  # **kwargs
    assert [n for n, f in schema.items() if f.required] == ["hidden_dim", "num_heads"]
    assert schema["causal"]["default"] is False and not schema["causal"]["required"]


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"hidden_dim": 4}, "missing required field 'num_heads' (int)"),
        ({"hidden_dim": "4", "num_heads": 2}, "field 'hidden_dim' should be int, got str '4'"),
        ({"hidden_dim": True, "num_heads": 2}, "field 'hidden_dim' should be int, got bool"),
        ({"hidden_dim": 4, "num_heads": 2, "window": 1.5}, "field 'window' should be int | None"),
        (
            {"hidden_dim": 4, "num_heads": 2, "kind": "fast"},
            "field 'kind' should be Literal['flash', 'naive'], got str 'fast'",
        ),
        ({"hidden_dim": 4, "num_heads": 2, "sizes": [1, "2"]}, "field 'sizes' should be list[int]"),
    ],
)
def test_validation_reports_each_problem(config, problem):
    register_module("windowed", "attention")(Attention)
    errors = ModuleRegistry.validate_config("windowed", config)
    assert any(problem in e for e in errors), errors


def test_optional_union_literal_list_values_that_fit_pass():
    register_module("windowed", "attention")(Attention)
    ok = {
        "hidden_dim": 4,
        "num_heads": 2,
        "window": None,
        "kind": "naive",
        "scale": 2,
        "sizes": [1, 2],
        "causal": True,
        "anything": 1,
    }  # extra accepted through **kwargs
    assert ModuleRegistry.validate_config("windowed", ok) == []


def test_string_annotations_and_unknown_fields():
    register_module("strict", "layer")(Strict)
    assert ModuleRegistry.validate_config("strict", {"width": 3, "names": ("a",)}) == []
    errors = ModuleRegistry.validate_config("strict", {"width": "3", "widht": 3})
    assert any("field 'width' should be int" in e for e in errors)
    assert any("unknown field 'widht' (did you mean 'width'?)" in e for e in errors)


def test_unknown_module_in_validation_raises_with_hint():
    register_module("windowed", "attention")(Attention)
    with pytest.raises(RegistryError, match=r"no module named 'windowd'.*did you mean 'windowed'"):
        ModuleRegistry.validate_config("windowd", {})


def test_duplicates_raise_unless_override():
    register_module("windowed", "attention", alias="win")(Attention)
    with pytest.raises(RegistryError, match=r"already registered.*override=True"):
        register_module("windowed", "attention")(Strict)
    with pytest.raises(RegistryError, match="alias 'win' of module 'strict' is already used"):
        register_module("strict", "layer", alias="win")(Strict)
    with pytest.raises(RegistryError, match="'win' is already an alias of module 'windowed'"):
        register_module("win", "layer")(Strict)
    register_module("windowed", "attention", override=True)(Strict)
    assert ModuleRegistry.get_module("windowed") is Strict
    assert ModuleRegistry.get_module("win") is None  # the replaced module's alias went with it


def test_search_is_case_insensitive_over_tags_words_and_aliases():
    register_module(
        "flash-attention-v3",
        "attention",
        description="Flash attention",
        tags=["Production", "sliding-window"],
        alias="flash3",
    )(Attention)
    assert [m.name for m in ModuleRegistry.search("SLIDING window")] == ["flash-attention-v3"]
    assert [m.name for m in ModuleRegistry.search("production")] == ["flash-attention-v3"]
    assert ModuleRegistry.search("flash3")[0].name == "flash-attention-v3"
    assert ModuleRegistry.list_modules(tags=["PRODUCTION"])[0].name == "flash-attention-v3"
    assert ModuleRegistry.search("   ") == []


def test_hardware_is_declared_not_assumed():
    register_module("windowed", "attention")(Attention)
    register_module("strict", "layer", hardware_support=["rv32"])(Strict)
    assert ModuleRegistry.get_metadata("windowed").hardware_support == []
    assert [
        m.name
        for m in ModuleRegistry.list_modules(hardware="RV32")
        if m.name in ("windowed", "strict")
    ] == ["strict"]


def test_docs_show_false_defaults_and_undeclared_hardware():
    register_module("windowed", "attention", version="3.0.0")(Attention)
    docs = ModuleRegistry.generate_docs(category="attention")
    assert "| `causal` | `bool` | no | `False` |" in docs
    assert "| `scale` | `float \\| None` | no | `0.0` |" in docs  # a 0.0 default is shown
    assert "**Hardware**: not declared" in docs
    assert "**Version**: 3.0.0" in docs and "## Attention (1)" in docs


def test_scoped_registry_restores_state():
    with ModuleRegistry.scoped():
        register_module("temp-module", "layer", alias="tmp")(Strict)
        assert ModuleRegistry.get_module("tmp") is Strict
    assert ModuleRegistry.get_module("temp-module") is None
    assert ModuleRegistry.get_module("tmp") is None


def test_bad_registrations_are_refused():
    with pytest.raises(RegistryError, match="module name must start"):
        register_module("has space", "layer")(Strict)
    with pytest.raises(RegistryError, match="category must be a non-empty string"):
        register_module("ok", "")(Strict)
    with pytest.raises(RegistryError, match="tags must be non-empty strings"):
        register_module("ok", "layer", tags=["", 3])(Strict)
    with pytest.raises(RegistryError, match="expected a class or a factory function"):
        ModuleRegistry.add(42, "ok", "layer")


def test_factory_functions_register_with_their_signature():
    def make(width: int, depth: int = 0) -> nn.Module:
        """Builds a stack."""
        return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

    register_module("stack", "model")(make)
    meta = ModuleRegistry.get_metadata("stack")
    assert [n for n, f in meta.config_schema.items() if f.required] == ["width"]
    assert ModuleRegistry.validate_config("stack", {"width": 2, "depth": 0}) == []


def test_everything_mico_ships_is_registered():
    categories = set(ModuleRegistry.categories())
    assert {"model", "layer", "dataset", "planner"} <= categories
    small = ModuleRegistry.get_metadata("small_cnn")
    assert small.extra["input_shape"] == (1, 8, 8) and small.extra["dataset"] == "digits"
    assert "rv32" in small.hardware_support
    assert ModuleRegistry.get_module("BitConv2d").__name__ == "BitConv2d"
    assert ModuleRegistry.get_metadata("digits").extra["offline"] is True
    assert ModuleRegistry.get_metadata("cifar10").extra["offline"] is False
    llama = ModuleRegistry.get_metadata("tinyllama")  # both modes deploy it
    assert "dynamic-mode-only" not in llama.tags and "rv32" in llama.hardware_support


def test_register_model_honours_input_shape():
    from mico.models import from_zoo, model_names, register_model

    @register_model("user_net", input_shape=(4,), dataset="synthetic")
    class UserNet(nn.Module):  # no default_input_shape of its own
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.fc = nn.Linear(4, width)

        def forward(self, x):
            return self.fc(x)

    assert "user_net" in model_names()
    model = from_zoo("user_net")
    assert model.default_input_shape == (4,)
    assert ModuleRegistry.get_metadata("user_net").category == "model"


@given(st.lists(st.sampled_from(["Alpha", "beta", "GAMMA-ray", "delta_x"]), min_size=1, max_size=3))
def test_tag_filter_is_case_insensitive(tags):
    with ModuleRegistry.scoped():
        register_module("tagged", "layer", tags=tags)(Strict)
        for tag in tags:
            for spelling in (tag.lower(), tag.upper()):
                assert [m.name for m in ModuleRegistry.list_modules(tags=[spelling])] == ["tagged"]
