"""Profile records are keyed by the program they measured (mico.hw.keys): a change to a kernel
file a program does not compile keeps its record, a change to one it compiles (or to the
generator) has it generated again, and measured again unless byte-identical; measuring in
worker processes gives the records measuring one by one gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from mico.hw import keys
from mico.hw.keys import ProgramKey
from mico.hw.layers import LayerShape
from mico.hw.profile import read_profile, read_profile_rows, run_profile

CONV = LayerShape("conv2d", "conv2d", 8, 16, (3, 3), (1, 1), 1, (8, 8), (8, 8))


def _edited(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``name`` look edited to the keys (the package's files stay as they are)."""
    real = keys.kernel_sources()

    def sources() -> dict[str, bytes]:
        return {**real, name: real.get(name, b"") + b"\n/* edited */\n"}

    monkeypatch.setattr(keys, "kernel_sources", sources)


def _key(kernels: tuple[str, ...]) -> ProgramKey:
    return ProgramKey("p1", keys.generator_hash(), keys.kernel_hashes(kernels))


def test_a_key_stays_fresh_until_its_own_kernels_change(monkeypatch) -> None:
    key = _key(("mico_linear.c", "mico_nn.h"))
    assert key.fresh()
    with monkeypatch.context() as m:
        _edited(m, "mico_dwconv.c")  # not compiled by this program
        assert key.fresh()
    with monkeypatch.context() as m:
        _edited(m, "mico_linear.c")  # its own kernel
        assert not key.fresh()
    with monkeypatch.context() as m:
        _edited(m, "mico_nn.h")  # a header it includes
        assert not key.fresh()
    stale = ProgramKey("p1", "another generator", dict(key.kernels))
    assert not stale.fresh()
    assert not ProgramKey("", keys.generator_hash(), dict(key.kernels)).fresh()
    # round trips
    assert ProgramKey.from_text(key.to_text()) == key
    assert ProgramKey.from_dict(key.to_dict()) == key


def test_program_hash_follows_every_program_file(tmp_path) -> None:
    (tmp_path / "model.c").write_text("int x;\n")
    (tmp_path / "mico_linear.c").write_text("int y;\n")
    (tmp_path / "Makefile").write_text("all:\n")
    (tmp_path / "inputs.bin").write_bytes(b"\0" * 4)
    first = keys.program_hash(tmp_path)
    (tmp_path / "inputs.bin").write_bytes(b"\1" * 4)  # data, not program
    assert keys.program_hash(tmp_path) == first
    (tmp_path / "mico_linear.c").write_text("int y = 1;\n")
    assert keys.program_hash(tmp_path) != first
    assert keys.program_hash(tmp_path, "main") != keys.program_hash(tmp_path)
    assert keys.project_kernels(tmp_path) == ["mico_linear.c"]


def test_generator_hash_leaves_out_measurement_and_search() -> None:
    import mico

    root = Path(mico.__file__).parent
    names = {p.relative_to(root).as_posix() for p in keys._generator_files(root)}
    assert "codegen/emitters.py" in names and "hw/nodes.py" in names
    assert "hw/proxy.py" not in names and "search/evaluator.py" not in names


def test_single_layer_rows_are_keyed(tmp_path, monkeypatch) -> None:
    """run_profile reuses a row whose program is current, re-measures the others, handing the
    measurement the earlier rows (an identical program returns their latency)."""
    path = tmp_path / "p.csv"
    calls: list[int] = []

    def keyed(layer, known):
        calls.append(len(known))
        return 100.0 + len(calls), _key(("mico_conv2d.c", "mico_nn.h"))

    pairs = [(8, 8), (4, 4)]
    run_profile(lambda _l: 0.0, [CONV], pairs, path, log=lambda _m: None, keyed=keyed)
    assert calls == [0, 0]
    again = run_profile(lambda _l: 0.0, [CONV], pairs, path, log=lambda _m: None, keyed=keyed)
    assert (again.measured, again.reused) == (0, 2) and calls == [0, 0]
    _edited(monkeypatch, "mico_dwconv.c")
    assert run_profile(lambda _l: 0.0, [CONV], pairs, path, log=lambda _m: None,
                       keyed=keyed).reused == 2  # fmt: skip
    _edited(monkeypatch, "mico_conv2d.c")
    assert read_profile(path) == []  # nothing current: every row's kernel changed
    result = run_profile(lambda _l: 0.0, [CONV], pairs, path, log=lambda _m: None, keyed=keyed)
    assert result.measured == 2 and calls == [0, 0, 1, 1]  # each given its earlier row
    assert len(read_profile_rows(path)) == 4 and len(read_profile(path)) == 2


def _record_pairs(run):
    return [(r.model, r.plan_name, r.release, r.tail, tuple(v for _, v in r.nodes))
            for r in run.records]  # fmt: skip


@pytest.fixture(scope="module")
def rv32_ready():
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip("rv32 toolchain missing: apt-get " + rv32.missing_tools_hint())


def test_model_records_reuse_and_workers(rv32_ready, tmp_path, monkeypatch) -> None:
    from mico.hw import modelprof

    plans = ["W8A8", "W2A2"]
    one = modelprof.profile_models(tmp_path / "one.jsonl", ["mlp"], plans, "rv32",
                                   log=lambda _m: None)  # fmt: skip
    assert one.measured == 2
    # two worker processes measure the same programs to the same counts
    two = modelprof.profile_models(tmp_path / "two.jsonl", ["mlp"], plans, "rv32",
                                   log=lambda _m: None, jobs=2)  # fmt: skip
    assert two.measured == 2
    assert _record_pairs(one) == _record_pairs(two)
    # a kernel the mlp does not compile changed: reused, nothing generated
    used = set(one.records[0].key.kernels)
    assert "mico_linear.c" in used and "mico_dwconv.c" not in used

    def refuse(*_a, **_k):
        raise AssertionError("a fresh record was measured again")

    with monkeypatch.context() as m:
        _edited(m, "mico_dwconv.c")
        m.setattr(modelprof, "measure_model", refuse)
        again = modelprof.profile_models(tmp_path / "one.jsonl", ["mlp"], plans, "rv32",
                                         log=lambda _m: None)  # fmt: skip
    assert (again.reused, again.measured) == (2, 0)
    # its own kernel "changed" (only to the keys: the files, so the programs, are the same):
    # generated again, found byte-identical, counts kept without a build
    with monkeypatch.context() as m:
        _edited(m, "mico_linear.c")
        m.setattr(modelprof, "_build", refuse)
        regenerated = modelprof.profile_models(tmp_path / "one.jsonl", ["mlp"], plans, "rv32",
                                               log=lambda _m: None)  # fmt: skip
    assert (regenerated.same_program, regenerated.measured) == (2, 0)
    assert _record_pairs(regenerated) == _record_pairs(one)


@pytest.mark.parametrize("kind", ["rv32", "host"])
def test_cached_objects_build_what_make_builds(kind, tmp_path, monkeypatch) -> None:
    """A program built from cached kernel objects is byte for byte the one make builds."""
    import shutil
    import subprocess

    from mico.hw import objcache
    from mico.hw.programs import _layer_project
    from mico.targets.catalog import get_target

    if kind == "rv32":
        from mico.targets import rv32

        if not rv32.available():
            pytest.skip("rv32 toolchain missing")
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    project, _, _ = _layer_project(CONV.with_bits(4, 4), get_target(kind), tmp_path, 0)
    variables = objcache.rv32_variables() if kind == "rv32" else objcache.host_variables()
    made = tmp_path / "made"
    shutil.copytree(project.directory, made)
    subprocess.run(["make", "-B", *variables], cwd=made, check=True, capture_output=True)
    first = objcache.build(project, variables, kind)  # compiles and caches the kernels
    assert any((tmp_path / "cache").rglob("mico_conv2d-*.o"))
    second = objcache.build(project, variables, kind)  # from the cache
    expected = (made / first.name).read_bytes()
    assert first == second and first.read_bytes() == expected
