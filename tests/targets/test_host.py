"""The host target: the generated project builds warning-free with gcc and clang (and with
AddressSanitizer + UBSan), every build computes the Python reference bit for bit, and
failures (missing compiler, compile error, crash, sanitizer report, time-out) raise
BuildError with the tool's output."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mico.errors import BuildError
from mico.targets import host

CONFIGS = [
    pytest.param("gcc", False, id="gcc"),
    pytest.param("clang", False, id="clang"),
    pytest.param("gcc", True, id="gcc-asan-ubsan"),
]


def _skip_without(cc: str) -> None:
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} missing: install {host.compiler_package(cc)}")


@pytest.mark.parametrize(("cc", "sanitize"), CONFIGS)
def test_every_compiler_computes_the_python_reference(cc, sanitize, project, samples, reference):
    _skip_without(cc)
    exe = host.build(project, cc=cc, sanitize=sanitize)
    assert exe == project.directory / "cnn" and exe.is_file()
    command = (project.directory / ".cnn.cmd").read_text()
    assert command.startswith(cc + " ") and "-ffp-contract=off" in command
    assert ("-fsanitize=address,undefined" in command) == sanitize
    outputs = host.run(project, samples)
    assert outputs.dtype == np.int32 and outputs.shape == (len(samples), 10)
    np.testing.assert_array_equal(outputs, reference)


def test_changing_the_compiler_rebuilds(project):
    _skip_without("clang")
    host.build(project, cc="gcc")
    again = subprocess.run(
        ["make", "-C", str(project.directory), "CC=gcc"], capture_output=True, text=True
    )
    assert again.returncode == 0 and "gcc " not in again.stdout  # up to date: no compile
    rebuilt = subprocess.run(
        ["make", "-C", str(project.directory), "CC=clang"], capture_output=True, text=True
    )
    assert rebuilt.returncode == 0 and "clang -O3 " in rebuilt.stdout  # host builds: -O3
    assert (project.directory / ".cnn.cmd").read_text().startswith("clang ")


def test_clang_with_sanitizers_builds_or_names_the_missing_runtime(project, samples, reference):
    _skip_without("clang")
    try:
        host.build(project, cc="clang", sanitize=True)
    except BuildError as exc:
        assert "clang has no sanitizer runtime" in str(exc)
        assert "libclang-rt-<version>-dev" in str(exc)
        return
    np.testing.assert_array_equal(host.run(project, samples), reference)


def test_a_missing_compiler_is_named_with_its_package(project, monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr("shutil.which", lambda t: None if t == "clang" else real_which(t))
    with pytest.raises(BuildError, match=r"host target needs clang on PATH.*apt-get install clang"):
        host.build(project, cc="clang")
    with pytest.raises(BuildError, match=r"needs gcc-13 on PATH.*apt-get install gcc-13"):
        host.build(project, cc="gcc-13")


def test_compiler_errors_name_the_compiler_and_show_its_output(bad_project):
    project = bad_project("exit3")
    (project.directory / "cnn.c").write_text("int broken = ;\n")
    for cc in ("gcc", "clang"):
        if shutil.which(cc) is None:
            continue
        with pytest.raises(BuildError, match=rf"(?s)building .* with {cc} failed .*cnn\.c"):
            host.build(project, cc=cc)


def test_makefile_refuses_unknown_targets_and_keeps_its_flags(project):
    def make(*variables: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-C", str(project.directory), *variables], capture_output=True, text=True
        )

    unknown = make("TARGET=avr")
    assert unknown.returncode != 0
    assert "TARGET=avr is not supported; use TARGET=host, TARGET=rv32 or TARGET=rv64" in (
        unknown.stderr
    )
    sanitized = make("TARGET=rv64", "SANITIZE=1")
    assert sanitized.returncode != 0
    assert "SANITIZE=1 is only supported with TARGET=host" in sanitized.stderr
    # CFLAGS given on the command line add to the required flags, never replace them
    for target in ("host", "rv32", "rv64"):
        dry = make("-n", "-B", f"TARGET={target}", "CFLAGS=-O1")
        assert dry.returncode == 0
        assert "-O1 -std=c99 -Wall -Wextra -Werror -ffp-contract=off" in dry.stdout, target


def test_a_crash_surfaces_with_the_signal_and_the_output(bad_project, samples):
    project = bad_project("abort")
    host.build(project)
    with pytest.raises(BuildError, match=r"(?s)cnn failed \(killed by SIGABRT\):.*about to abort"):
        host.run(project, samples[:1])


def test_a_bad_exit_status_surfaces_with_the_output(bad_project, samples):
    project = bad_project("exit3")
    host.build(project)
    with pytest.raises(BuildError, match=r"(?s)cnn failed \(exit 3\):.*cannot open the samples"):
        host.run(project, samples[:1])


@pytest.mark.parametrize(
    ("kind", "report"),
    [
        ("use_after_free", "AddressSanitizer: heap-use-after-free"),
        ("signed_overflow", "runtime error: signed integer overflow"),
    ],
)
def test_sanitizer_reports_surface_as_build_errors(kind, report, bad_project, samples):
    project = bad_project(kind)
    host.build(project, sanitize=True)
    with pytest.raises(BuildError, match=rf"(?s)cnn failed \(exit 1\):.*{report}"):
        host.run(project, samples[:1])


def test_a_program_that_hangs_is_stopped(bad_project, samples):
    project = bad_project("loop")
    host.build(project)
    with pytest.raises(BuildError, match=r"cnn ran for more than 0\.3 s and was stopped"):
        host.run(project, samples[:1], timeout=0.3)


def test_build_cache_reuses_kernel_objects_and_leaves_make_up_to_date(
    project, samples, reference, tmp_path, monkeypatch
):
    """$MICO_BUILD_CACHE: kernel objects compiled once into the cache, the program still the
    reference's, `make` afterwards finds it up to date; with the cache off, make builds."""
    from mico.targets.io import BUILD_CACHE_ENV

    cache = tmp_path / "objects"
    monkeypatch.setenv(BUILD_CACHE_ENV, str(cache))
    exe = host.build(project)
    objects = sorted(p.name for p in cache.iterdir())
    assert objects and all(name.startswith("mico_") and name.endswith(".o") for name in objects)
    np.testing.assert_array_equal(host.run(project, samples), reference)
    again = subprocess.run(
        ["make", "-C", str(project.directory), "TARGET=host", "CC=gcc", "SANITIZE=0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "gcc " not in again.stdout  # the stamp and the executable as make leaves them
    exe.unlink()
    host.build(project)  # every kernel object from the cache: nothing new compiled
    assert sorted(p.name for p in cache.iterdir()) == objects
    np.testing.assert_array_equal(host.run(project, samples), reference)
    monkeypatch.setenv(BUILD_CACHE_ENV, "")
    exe.unlink()
    host.build(project)
    assert exe.is_file() and len(list(cache.iterdir())) == len(objects)
