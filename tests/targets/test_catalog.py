"""Targets are data: the shipped target files load, a user's board is one YAML file in a folder,
every mistake names the file and the field, `mico targets` lists them with their availability,
and each target is in the module registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.errors import ConfigError
from mico.registry import ModuleRegistry
from mico.targets import catalog
from mico.targets.catalog import availability, get_target, load_catalog, load_target_file

runner = CliRunner()

BOARD = """\
name: gd32
description: GD32VF103, 128 KiB flash, 32 KiB SRAM
isa: rv32imac
extensions: [zicsr, zbb]
memory: {flash: 128 KiB, ram: 32768}
bits: {weight: [2, 4, 8], activation: [8, 4]}
runner: qemu-rv32
cost: instructions
"""


def _board(folder: Path, text: str = BOARD, name: str = "gd32.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_shipped_targets_load(monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    targets = load_catalog()
    assert set(targets) == {"host", "rv32", "rv32zbb", "rv64", "vexriscv", "bitfusion"}
    assert targets["rv32zbb"].extensions == ("zicsr", "zbb")  # same runner, more ISA
    assert targets["rv32zbb"].runner == "qemu-rv32"
    rv32 = targets["rv32"]
    assert (rv32.isa, rv32.runner, rv32.cost) == ("rv32imac", "qemu-rv32", "instructions")
    assert rv32.flash_bytes == rv32.ram_bytes == 4 << 20
    assert targets["bitfusion"].weight_bits == (2, 4, 8)
    assert targets["bitfusion"].frequency_hz == 500e6
    assert targets["vexriscv"].cost == "cycles"
    assert targets["host"].flash_bytes is None  # not limited
    assert 1.58 in targets["host"].weight_bits


def test_a_board_is_a_file(tmp_path, monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    _board(tmp_path / "boards")
    spec = get_target("gd32", [tmp_path / "boards"])
    assert spec.flash_bytes == 128 * 1024 and spec.ram_bytes == 32768
    assert spec.extensions == ("zicsr", "zbb")
    assert spec.activation_bits == (4, 8)
    monkeypatch.setenv(catalog.ENV_DIRS, str(tmp_path / "boards"))
    assert "gd32" in load_catalog()
    with pytest.raises(ConfigError, match="unknown target 'nope'; targets: bitfusion, gd32"):
        get_target("nope")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("cost: instructions\n", "cost: instructions\nspeed: 3\n", "field 'speed': unknown key"),
        ("isa: rv32imac", "isa: rv32imaz", "field 'isa': unknown single-letter extension(s) z"),
        ("isa: rv32imac", "isa: arm-m4", "field 'isa': 'arm-m4' is not an ISA"),
        ("isa: rv32imac", "isa: rv32imc", "runner 'qemu-rv32' builds rv32imac code"),
        ("isa: rv32imac", "isa: rv64imac", "runner 'qemu-rv32' builds rv32imac code"),
        ("ram: 32768", "ram: -4", "field 'memory.ram': must be positive, got -4"),
        ("flash: 128 KiB", "flash: 128 parsecs", "field 'memory.flash': expected bytes"),
        ("runner: qemu-rv32", "runner: spike", "field 'runner': unknown runner 'spike'"),
        ("cost: instructions", "cost: cycles", "runner 'qemu-rv32' measures instructions"),
        ("cost: instructions", "cost: joules", "unknown cost model 'joules'"),
        ("[2, 4, 8]", "[2, 4, 9]", "field 'bits.weight': bits.weight entry is 9, outside"),
        ("[zicsr, zbb]", "[zicsr, m]", "field 'extensions': 'm' is not a Z, X or S extension"),
        ("name: gd32\n", "", "field 'name': missing"),
        ("name: gd32", "name: GD 32", "field 'name': expected lower-case letters"),
    ],
)
def test_mistakes_name_file_and_field(tmp_path, old, new, message):
    assert old in BOARD
    path = _board(tmp_path, BOARD.replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        load_target_file(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_duplicate_names_and_missing_folders_are_errors(tmp_path, monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    _board(tmp_path / "a", BOARD.replace("name: gd32", "name: rv32"))
    with pytest.raises(ConfigError, match="target 'rv32' is declared twice"):
        load_catalog([tmp_path / "a"])
    with pytest.raises(ConfigError, match=r"targets folder .* does not exist"):
        load_catalog([tmp_path / "missing"])
    _board(tmp_path / "b", "- not a mapping\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_catalog([tmp_path / "b"])


def test_availability_names_what_is_missing(monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    targets = load_catalog()
    assert availability(targets["bitfusion"]) == (True, "ready")
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, why = availability(targets["rv32"])
    assert not ok and "qemu-system-riscv32" in why and "apt-get install" in why
    ok, why = availability(targets["host"])
    assert not ok and "valgrind" in why


def test_vexriscv_needs_its_module_and_tools(monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    spec = load_catalog()["vexriscv"]
    assert (spec.isa, spec.runner, spec.cost) == ("rv32imac", "verilator-vexriscv", "cycles")
    ok, why = availability(spec)
    import importlib.util

    if importlib.util.find_spec("mico.targets.vexriscv") is None:
        assert not ok and "module mico.targets.vexriscv is not installed" in why
        return
    from mico.targets import vexriscv

    assert ok == vexriscv.available()
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, why = availability(spec)
    assert not ok and "verilator" in why


def test_targets_command_lists_availability(tmp_path, monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    _board(tmp_path)
    result = runner.invoke(app, ["targets", "--targets-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("host", "rv32", "rv64", "vexriscv", "bitfusion", "gd32"):
        assert f"│ {name} " in result.output
    assert "128 KiB" in result.output and "2,4,8" in result.output
    row = next(line for line in result.output.splitlines() if "│ bitfusion " in line)
    assert "yes" in row
    monkeypatch.setenv("PATH", "/nonexistent")
    result = runner.invoke(app, ["targets"])
    assert "rv32: not available: " in result.output and "apt-get install" in result.output
    _board(tmp_path / "bad", BOARD.replace("ram: 32768", "ram: -1"))
    result = runner.invoke(app, ["targets", "--targets-dir", str(tmp_path / "bad")])
    assert result.exit_code == 2
    assert "memory.ram" in result.output and "must be positive" in result.output


def test_targets_are_registered():
    metadata = ModuleRegistry.get_metadata("rv32")
    assert metadata.category == "target"
    assert metadata.extra["isa"] == "rv32imac" and metadata.extra["runner"] == "qemu-rv32"
    assert metadata.extra["weight_bits"] == [1, 1.58, 2, 3, 4, 5, 6, 7, 8]
    assert metadata.extra["flash"] == f"{4 << 20} B"
    names = {m.name for m in ModuleRegistry.list_modules(category="target")}
    assert {"host", "rv32", "rv64", "vexriscv", "bitfusion"} <= names
    assert ModuleRegistry.get_metadata("bitfusion").hardware_support == ["bitfusion"]


def test_user_targets_are_registered_and_a_broken_one_is_named(tmp_path, monkeypatch):
    from mico.targets import registration

    ModuleRegistry.list_modules()  # mico's own modules, registered once per process
    _board(tmp_path)
    monkeypatch.setenv(catalog.ENV_DIRS, str(tmp_path))
    with ModuleRegistry.scoped():
        registration.register(ModuleRegistry)
        board = ModuleRegistry.get_metadata("gd32")
        assert board.extra["ram"] == "32768 B" and board.author == "user"
        assert board.extra["target_file"] == str(tmp_path / "gd32.yaml")
        assert ModuleRegistry.get_metadata("rv32").extra["target_file"] == "rv32.yaml"
    _board(tmp_path, BOARD.replace("runner: qemu-rv32", "runner: spike"))
    with ModuleRegistry.scoped():
        for name in ("host", "rv32", "rv64", "vexriscv", "bitfusion"):
            ModuleRegistry.unregister(name)
        with pytest.raises(ConfigError, match="field 'runner': unknown runner 'spike'"):
            registration.register(ModuleRegistry)
        assert ModuleRegistry.get_metadata("rv32").category == "target"  # mico's own first


def test_targets_available_filter(monkeypatch):
    monkeypatch.delenv(catalog.ENV_DIRS, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    result = runner.invoke(app, ["targets", "--available"])
    assert result.exit_code == 0, result.output
    assert "│ bitfusion " in result.output and "│ rv32 " not in result.output
