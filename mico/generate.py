"""``mico generate``: greedy text generation with a language model, from Python and from its C
program, token for token, and the first token where they part.

Each step runs the model on the window of the last ``seq_len`` tokens (right-padded: a causal
model's logits at a position never see the positions after it) and takes the most likely next
token. The C program is the dynamic-mode project of the model, built for the host and run on
every window; the Python side is the graph the C was emitted from (the reference executor), so
the two must agree exactly. Without a tokenizer of its own the model reads UTF-8 bytes (ids
0..255).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mico.errors import ConfigError

Log = Callable[[str], None]


@dataclass
class Generation:
    """The prompt's ids and the tokens each side generated."""

    prompt_ids: list[int]
    python_ids: list[int] = field(default_factory=list)
    c_ids: list[int] = field(default_factory=list)

    @property
    def first_difference(self) -> int | None:
        """The index (among generated tokens) where Python and C first differ, or None."""
        for i, (a, b) in enumerate(zip(self.python_ids, self.c_ids, strict=False)):
            if a != b:
                return i
        return (
            None
            if len(self.python_ids) == len(self.c_ids)
            else min(len(self.python_ids), len(self.c_ids))
        )


def _window(ids: list[int], seq_len: int) -> tuple[np.ndarray, int]:
    """The last ``seq_len`` ids right-padded with 0, and the position of the last real one."""
    tail = ids[-seq_len:]
    window = np.zeros((1, seq_len), dtype=np.float32)
    window[0, : len(tail)] = tail
    return window, len(tail) - 1


def generate(
    model: nn.Module,
    prompt_ids: list[int],
    tokens: int,
    target: str = "host",
    work_dir: str | Path | None = None,
    log: Log = print,
) -> Generation:
    """Greedily continue ``prompt_ids`` by ``tokens`` tokens in Python and in C (host)."""
    from mico.codegen.compile import compile_model, token_vocabulary
    from mico.targets import host

    if target != "host":
        raise ConfigError(
            f"mico generate runs on the host for now, got --target {target}; the rv32 program "
            "computes the same logits (mico verify --target rv32) but steps take seconds each"
        )
    vocab = token_vocabulary(model)
    seq_len = int(getattr(model, "default_input_shape", (0,))[-1])
    if vocab is None or not seq_len or getattr(model, "task", "") != "language":
        raise ConfigError("mico generate needs a language model (token ids in, logits out)")
    if not prompt_ids:
        raise ConfigError("the prompt is empty; give at least one character")
    if max(prompt_ids) >= vocab:
        raise ConfigError(f"the prompt has token ids beyond the model's vocabulary of {vocab}")
    if not 1 <= tokens <= 10_000:
        raise ConfigError(f"--tokens must be from 1 to 10000, got {tokens}")
    model = model.eval()
    example = torch.from_numpy(_window(prompt_ids, seq_len)[0])
    with tempfile.TemporaryDirectory(prefix="mico-generate-") as tmp:
        out_dir = Path(work_dir) if work_dir is not None else Path(tmp) / "model"
        log(f"compiling the model to C (dynamic mode) in {out_dir}")
        compiled = compile_model(model, example, out_dir, "lm", mode="dynamic", force=False)
        host.build(compiled.project)
        result = Generation(list(prompt_ids))
        for side, ids in (("python", result.python_ids), ("c", result.c_ids)):
            context = list(prompt_ids)
            for _ in range(tokens):
                window, last = _window(context, seq_len)
                if side == "python":
                    logits = compiled.reference(window)
                else:
                    logits = host.run(compiled.project, window)
                logits = np.asarray(logits).reshape(seq_len, -1)
                next_id = int(np.argmax(logits[last]))
                ids.append(next_id)
                context.append(next_id)
    return result


def tokenizer_for(model: nn.Module, checkpoint_extra: dict | None = None):
    """The model's tokenizer: the one its checkpoint carries, else bytes (ids 0..255)."""
    from mico.data import ByteBPETokenizer

    extra = checkpoint_extra or {}
    path = extra.get("tokenizer")
    if isinstance(path, str) and Path(path).is_file():
        return ByteBPETokenizer.load(path)
    return ByteBPETokenizer(special_tokens=())


def decode(tokenizer, ids: list[int]) -> str:
    """Text of ``ids``; an id the tokenizer does not know shows as ``<id>`` (an untrained
    model's vocabulary may be larger than its byte tokenizer's)."""
    parts: list[str] = []
    run: list[int] = []
    for token in ids:
        if token < tokenizer.vocab_size:
            run.append(token)
            continue
        if run:
            parts.append(tokenizer.decode(run))
            run = []
        parts.append(f"<{token}>")
    if run:
        parts.append(tokenizer.decode(run))
    return "".join(parts)
