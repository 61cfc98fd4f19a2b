"""Profiles of schema 3: records of another version are refused (their kernel path labels are
not this version's), and the samples of a program target are small layers, W1A1 included, so
that the proxy sees the binary linear layers from the popcount gate down."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mico.codegen.binary_plan import LINEAR_MIN_MACS
from mico.errors import ConfigError
from mico.hw.modelprof import ModelRecord, read_records
from mico.hw.opshape import OpShape, op_from_layer
from mico.hw.profile import (
    CONV1D_MAX_MACS,
    SCHEMA_VERSION,
    SMALL_LAYER_MACS,
    bit_pairs,
    profile_path,
    sample_shapes,
)
from mico.hw.programs import resolve_backend

NODE = OpShape("dw", "dwconv2d", macs=1000, in_channels=8, out_channels=8, groups=8,
               path="dwp_k5_tab")  # fmt: skip


def _record(model: str = "dscnn") -> ModelRecord:
    return ModelRecord(model, "W4A4", 1234.0, ((NODE, 1000.0),), 10.0)


def test_records_carry_the_schema_version_and_round_trip(tmp_path):
    assert SCHEMA_VERSION == 3
    assert profile_path("rv32", "abcdef0123456", tmp_path).name == "rv32-abcdef0123-v3.csv"
    line = _record().to_json()
    assert json.loads(line)["version"] == SCHEMA_VERSION
    path = tmp_path / "m.jsonl"
    path.write_text(line + "\n")
    (read,) = read_records(path)
    assert read.nodes[0][0].path == "dwp_k5_tab"


@pytest.mark.parametrize("version", [None, 2])
def test_records_of_an_older_version_are_refused(tmp_path, version):
    """A version-2 record (no version field, or 2) labels every pair form ``dwp_f1``: a fit
    must not mix it with this version's labels, so reading it is a clear error."""
    data = json.loads(_record().to_json())
    data["nodes"][0][0]["path"] = "dwp_f1"
    if version is None:
        del data["version"]
    else:
        data["version"] = version
    path = tmp_path / "old.models.jsonl"
    path.write_text(_record("mlp").to_json() + "\n" + json.dumps(data) + "\n")
    with pytest.raises(ConfigError, match=r"line 2 is a record of schema version 2.*reads "
                       r"version 3: move the file away"):  # fmt: skip
        read_records(path)


def test_program_targets_profile_w1a1_besides_the_grid():
    rv32 = resolve_backend("rv32")
    assert rv32.extra_pairs == ((1, 1),)
    pairs = bit_pairs(rv32.bits, rv32.extra_pairs)
    assert pairs[-1] == (1, 1) and len(pairs) == len(rv32.bits) ** 2 + 1
    assert bit_pairs((2, 8), ((2, 2), (1, 1))) == [(2, 2), (2, 8), (8, 2), (8, 8), (1, 1)]
    assert resolve_backend("bitfusion").extra_pairs == ()  # its cycle model runs 2 to 8 bits


def test_program_targets_profile_sign_weight_convolutions(tmp_path, monkeypatch):
    """A program target also measures the sampled one-group convolutions at W1A8 (binary
    weights on 8-bit codes: the sign-weight sums, which no pair of the grid shows), and only
    them: linear layers stay at W1A1, depthwise ones on the grid."""
    from typer.testing import CliRunner

    from mico.cli import app
    from mico.hw import programs
    from mico.hw.keys import ProgramKey
    from mico.hw.profile import SIGN_WEIGHT_KINDS, read_profile_rows

    rv32 = resolve_backend("rv32")
    assert rv32.sign_pairs == ((1, 8),) and set(SIGN_WEIGHT_KINDS) == {"conv2d", "conv1d"}
    assert resolve_backend("bitfusion").sign_pairs == ()
    # the sampled convolutions at W1A8: most of those of 72 taps or more take the sums
    shapes = sample_shapes(["conv1d", "conv2d"], 48, seed=0, include_zoo=False,
                           max_macs=SMALL_LAYER_MACS)  # fmt: skip
    paths = [op_from_layer(s.with_bits(1, 8), in_signed=True).path for s in shapes]
    assert paths.count("addsub") >= 10
    # the profile command measures them (a stand-in for the programs' counts)
    seen = []

    def keyed(layer, earlier):
        seen.append(layer)
        return float(layer.macs + 1), ProgramKey("p", "g", {"mico_nn.h": "h"})

    fake = dataclasses.replace(rv32, keyed=keyed)
    monkeypatch.setattr(programs, "resolve_backend", lambda *a, **k: fake)
    out = tmp_path / "rv32.csv"
    result = CliRunner().invoke(app, ["profile", "--target", "rv32", "--ops",
                                      "conv2d,dwconv,linear", "--samples", "6", "--no-zoo",
                                      "--no-fit", "-o", str(out), "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    pairs: dict[str, set] = {}
    for layer, _, _ in read_profile_rows(out):
        pairs.setdefault(layer.kind, set()).add((layer.w_bits, layer.a_bits))
    grid = set(bit_pairs(rv32.bits))
    assert pairs["conv2d"] == grid | {(1, 1), (1, 8)}
    assert pairs["dwconv2d"] == grid | {(1, 1)}
    assert pairs["linear"] == {(1, 1)}
    assert len(seen) == len(read_profile_rows(out))


def test_sampled_small_layers_straddle_the_binary_linear_gate():
    """Bounded to SMALL_LAYER_MACS, the linear samples include binary layers below the
    popcount gate (the plain kernel) and above it (the popcount kernel); conv1d samples keep
    their own bound and draws."""
    shapes = sample_shapes(["conv1d", "conv2d", "linear"], 48, seed=0, include_zoo=False,
                           max_macs=SMALL_LAYER_MACS)  # fmt: skip
    unbounded = sample_shapes(["conv1d"], 16, seed=0, include_zoo=False)
    assert [s for s in shapes if s.kind == "conv1d"] == unbounded
    assert all(s.macs <= CONV1D_MAX_MACS for s in unbounded)
    small = [s for s in shapes if s.kind != "conv1d"]
    assert {s.kind for s in small} == {"conv2d", "linear"}
    assert all(0 < s.macs <= SMALL_LAYER_MACS for s in small)
    linear = [s.with_bits(1, 1) for s in small if s.kind == "linear"]
    paths = {op_from_layer(s, in_signed=True).path for s in linear if s.macs < LINEAR_MIN_MACS}
    assert paths == {"linear"}
    paths = {op_from_layer(s, in_signed=True).path for s in linear if s.macs >= LINEAR_MIN_MACS}
    assert paths == {"bin_swar"}
    # without a bound, the same draw has larger layers
    assert max(s.macs for s in sample_shapes(["conv2d"], 16, seed=0, include_zoo=False)) > (
        SMALL_LAYER_MACS
    )
