"""Constructs mico cannot compile end in one clear mico error, in both modes.

Each case is a model in a file the test writes, compiled with ``mico compile file.py:Class`` as
a user would. The refusal must be a single ``error:`` line (exit 2) that names what was refused
and where in the user's model; never a raw Python exception, a traceback or torch's graph dump.
"""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from mico.cli import app

runner = CliRunner()

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 3)

    class DataDependentIf(Base):
        def forward(self, x):
            if x.sum() > 0:
                return self.fc(x)
            return -self.fc(x)

    class Sort(Base):
        def forward(self, x):
            return torch.sort(self.fc(x), dim=-1).values

    class Cumsum(Base):
        def forward(self, x):
            return torch.cumsum(self.fc(x), -1)

    class Argmax(Base):
        def forward(self, x):
            return self.fc(x).argmax(-1)

    class Nonzero(Base):
        def forward(self, x):
            return torch.nonzero(self.fc(x))

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 4, batch_first=True)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.rnn(x.unsqueeze(1))[0][:, -1])

    class Inner(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, -1)

    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 3)
            self.block = nn.Sequential(nn.Identity(), Inner())

        def forward(self, x):
            return self.block(self.fc(x))
    """
)

# class, mode, words the error line must contain (case-insensitive)
CASES = [
    ("DataDependentIf", "static", ["could not trace DataDependentIf", "models.py:", "if x.sum()"]),
    ("DataDependentIf", "dynamic", ["could not trace DataDependentIf", "torch.where"]),
    ("Sort", "static", ["aten.sort", "forward() of Sort", "static"]),
    ("Sort", "dynamic", ["aten.sort", "forward() of Sort", "float32 only"]),
    ("Cumsum", "static", ["aten.cumsum", "static", "replace it"]),
    ("Cumsum", "dynamic", ["aten.cumsum", "no C implementation", "register"]),
    ("Argmax", "static", ["aten.argmax", "static"]),
    ("Argmax", "dynamic", ["aten.argmax", "int64", "logits"]),
    ("Nonzero", "static", ["sym_size", "not a tensor"]),
    ("Nonzero", "dynamic", ["sym_size", "not a tensor"]),
    ("Recurrent", "static", ["layer 'rnn' (LSTM)", "static"]),
    ("Recurrent", "dynamic", ["layer 'rnn' (LSTM)", "no C implementation"]),
    ("Nested", "static", ["aten.cumsum", "layer 'block.1' (Inner)", "static"]),
    ("Nested", "dynamic", ["aten.cumsum", "layer 'block.1' (Inner)"]),
]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    (folder / "models.py").write_text(MODELS)
    return folder


@pytest.mark.parametrize(("cls", "mode", "words"), CASES, ids=[f"{c}-{m}" for c, m, _ in CASES])
def test_unsupported_construct_is_one_clear_error(models_dir, monkeypatch, cls, mode, words):
    monkeypatch.chdir(models_dir)
    out = models_dir / f"out-{cls}-{mode}"
    result = runner.invoke(
        app,
        ["compile", f"models.py:{cls}", "--input-shape", "8", "--mode", mode, "-o", str(out)],
    )
    text = result.output
    assert result.exit_code == 2, text
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], text  # progress lines, then the error
    assert f"compiling {cls} ({mode} mode)" in text
    for word in words:
        assert word.lower() in text.lower(), (word, text)
    for noise in ("Traceback", "def forward(", "TORCH_LOGS", "UserWarning"):
        assert noise not in text, text
    assert not out.exists()  # nothing half-written
