"""Every fenced Python block and every `mico` command in README.md and docs/*.md runs as written.

The blocks of one page run in order, in one namespace and one temporary working directory, so a
page may build on its earlier blocks (a command may use the checkpoint an earlier command wrote).
Registries are scoped per page, so a page that registers an op or a module leaves nothing behind.
A block is skipped only when a comment on the line before it says why (``<!-- doctest: skip
REASON -->``), or when it needs the RISC-V toolchain and the machine lacks it (the skip names the
packages). ``<!-- doctest: file NAME -->`` before a block writes it to NAME in the working
directory, so a page can show a config file and then the command that reads it. Pages whose
Python examples a dedicated test checks in more detail are noted in ``COVERED``. Generated
pages (docs/reference/) are checked by ``mico docs --check`` instead.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?:<!-- doctest: (?P<skip>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```",
                   re.S | re.M)  # fmt: skip
SHELL_LANGS = ("", "bash", "sh", "shell", "console")
#: pages whose Python blocks dedicated tests run and check (tests/test_readme.py, tests/registry)
COVERED = {"README.md": "tests/test_readme.py", "codegen.md": "tests/test_readme.py",
           "registry.md": "tests/registry/test_docs_examples.py"}  # fmt: skip
#: `make demo` is `mico demo` once .venv exists (the Makefile's own recipe): replayed as such;
#: `make test` is this test suite itself
REPLAYED_AS = {"make demo": "mico demo --quiet"}
NOT_REPLAYED = ("make test",)


@dataclass
class Block:
    page: Path
    line: int
    kind: str  # "python", "command" or "file"
    text: str
    skip: str | None
    path: str = ""


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        lang, body, skip = match["lang"], match["body"], match["skip"]
        if skip is not None and skip.startswith("file "):
            found.append(Block(page, line, "file", body, None, skip[5:].strip()))
            continue
        if skip is not None and not skip.startswith("skip"):
            raise AssertionError(f"{page.name}:{line}: unknown doctest directive {skip!r}")
        reason = skip[4:].strip() if skip else None
        if lang == "python":
            found.append(Block(page, line, "python", body, reason))
        elif lang in SHELL_LANGS:
            for offset, raw in enumerate(body.splitlines()):
                command = raw.split("  #")[0].strip()
                command = REPLAYED_AS.get(command, command)
                if command.startswith("mico "):
                    found.append(Block(page, line + 1 + offset, "command", command, reason))
    return found


def write_mnist(root: Path, n_train: int = 40, n_test: int = 20) -> None:
    """Small MNIST IDX files (28x28 ubyte images, labels 0..9) where the pages look for them."""
    import struct

    import numpy as np

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (root / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes()
        )
        (root / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 0x801, n) + labels.tobytes()
        )


def needs_riscv(block: Block) -> bool:
    return "rv32" in block.text or "rv64" in block.text


def riscv_missing() -> str | None:
    from mico.targets import rv32, rv64

    if not rv32.available():
        return rv32.missing_tools_hint()
    if hasattr(rv64, "available") and not rv64.available():
        return rv64.missing_tools_hint()
    return None


def test_every_page_is_found_and_parsed():
    names = {p.name for p in PAGES}
    assert {"README.md", "quantization.md", "ir.md", "codegen.md"} <= names
    assert sum(len(blocks(p)) for p in PAGES) >= 19


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run(page: Path, tmp_path, monkeypatch):
    from mico.cli import app
    from mico.ir.ops.registry import OpRegistry
    from mico.registry import ModuleRegistry

    found = blocks(page)
    if not found:
        pytest.skip(f"{page.name} has no Python blocks or mico commands")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # "~/datasets" in the pages
    write_mnist(tmp_path / "home" / "datasets")
    runner = CliRunner()
    namespace: dict = {"__name__": f"doc_{page.stem}"}
    ran, skipped = 0, []
    with OpRegistry.scoped(), ModuleRegistry.scoped():
        for block in found:
            where = f"{page.name}:{block.line}"
            if block.skip is not None:
                skipped.append(f"{where}: {block.skip}")
                continue
            if block.kind == "python" and page.name in COVERED:
                continue
            if block.kind == "command" and block.text.startswith(NOT_REPLAYED):
                continue
            if needs_riscv(block) and (missing := riscv_missing()):
                skipped.append(f"{where}: needs the RISC-V tools ({missing})")
                continue
            if block.kind == "file":
                Path(block.path).write_text(block.text)
                continue
            if block.kind == "python":
                try:
                    exec(compile(block.text, where, "exec"), namespace)
                except Exception as exc:
                    raise AssertionError(f"{where}: the example fails: {exc!r}") from exc
            else:
                result = runner.invoke(app, shlex.split(block.text)[1:])
                assert result.exit_code == 0, f"{where}: `{block.text}` failed:\n{result.output}"
            ran += 1
    if skipped:
        print("skipped:", *skipped, sep="\n  ")
