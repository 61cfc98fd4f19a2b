"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], str(README), "exec"), {})
    assert (tmp_path / "out" / "digits" / "digits.c").is_file()


def test_readme_quantize_any_model_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if "set_qscheme" in b)
    scope: dict = {}
    exec(compile(example, str(README), "exec"), scope)
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.5 < accuracy <= 1.0
    assert [layer.w_bits for layer in scope["model"].get_qlayers()] == [8, 6, 6, 4, 1.58]


def test_codegen_guide_examples_run(tmp_path, monkeypatch):
    """docs/codegen.md: compile_model on the zoo, and the seed 000 handler example."""
    from mico.codegen import MiCoOpRegistry
    from mico.ir.ops.registry import OpRegistry

    guide = README.parent / "docs" / "codegen.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], str(guide), "exec"), {})
    assert (tmp_path / "out" / "resnet8" / "resnet8.c").is_file()
    monkeypatch.setattr(MiCoOpRegistry, "_modules", dict(MiCoOpRegistry._modules))
    with OpRegistry.scoped():
        scope: dict = {}
        exec(compile(blocks[1], str(guide), "exec"), scope)
        assert "MiCo_sigmoid4d_f32" in (tmp_path / "out" / "sigmoid" / "model.c").read_text()
        assert (tmp_path / "out" / "sigmoid" / "model.bin").is_file()
