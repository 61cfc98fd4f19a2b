"""``mico generate``: text generation with a language model, from Python and from a C program
that runs the whole loop on the target (host, or rv32 under qemu), token for token, and the
first token where they part.

Each step runs the model on the window of the last ``seq_len`` tokens (right-padded: a causal
model's logits at a position never see the positions after it) and chooses the next token with
:mod:`mico.sampling` (greedy, or seeded top-k sampling whose integer arithmetic C shares). The C
program (:mod:`mico.codegen.generate_c`) is built from the model's dynamic-mode project; the
Python side runs the graph the C was emitted from (the reference executor). Without a tokenizer
of its own the model reads UTF-8 bytes (ids 0..255).
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.errors import BuildError, ConfigError
from mico.sampling import Sampler

Log = Callable[[str], None]


@dataclass
class Generation:
    """The prompt's ids and the tokens each side generated."""

    prompt_ids: list[int]
    python_ids: list[int] = field(default_factory=list)
    c_ids: list[int] = field(default_factory=list)
    c_text: bytes = b""  # the text the C program printed (its own decoding of c_ids)

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
    sampler: Sampler | None = None,
    token_text: list[bytes] | None = None,
    timeout: float = 900,
) -> Generation:
    """Continue ``prompt_ids`` by ``tokens`` tokens in Python and in C on ``target``.

    The C side is one program (``generate.c``) that runs the whole loop on the target: windows,
    the model, the sampler (greedy by default; ``sampler`` for seeded top-k sampling) and the
    text (``token_text``: each id's bytes). Python runs the same loop on the reference graph.
    """
    from mico.codegen.compile import compile_model, token_vocabulary

    if target not in GENERATE_TARGETS:
        raise ConfigError(
            f"--target {target!r} is not one mico generate runs on; use "
            f"{' or '.join(GENERATE_TARGETS)}"
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
    if len(prompt_ids) > 100_000:
        raise ConfigError(f"the prompt has {len(prompt_ids)} tokens; at most 100000")
    sampler = sampler or Sampler()
    model = model.eval()
    example = torch.from_numpy(_window(prompt_ids, seq_len)[0])
    with tempfile.TemporaryDirectory(prefix="mico-generate-") as tmp:
        out_dir = Path(work_dir) if work_dir is not None else Path(tmp) / "model"
        log(f"compiling the model to C (dynamic mode) in {out_dir}")
        compiled = compile_model(model, example, out_dir, "lm", mode="dynamic", force=False)
        result = Generation(list(prompt_ids))
        python_side = Sampler(sampler.top_k, sampler.temperature, sampler.seed)
        context = list(prompt_ids)
        for _ in range(tokens):
            window, last = _window(context, seq_len)
            logits = np.asarray(compiled.reference(window)).reshape(seq_len, -1)
            next_id = python_side.pick(logits[last])
            result.python_ids.append(next_id)
            context.append(next_id)
        c_side = Sampler(sampler.top_k, sampler.temperature, sampler.seed)
        text = token_text if token_text is not None else [bytes([i]) for i in range(256)]
        log(f"running the generation loop in C on {target}")
        result.c_ids, result.c_text = _run_in_c(
            compiled.project, prompt_ids, tokens, c_side, vocab, seq_len, text[:vocab], target,
            timeout,
        )  # fmt: skip
    return result


GENERATE_TARGETS = ("host", "rv32")


def _run_in_c(
    project: Any,
    prompt_ids: list[int],
    tokens: int,
    sampler: Sampler,
    vocab: int,
    seq_len: int,
    token_text: list[bytes],
    target: str,
    timeout: float,
) -> tuple[list[int], bytes]:
    """Build ``generate.c`` with the model's sources for ``target``, run it, read its ids."""
    from mico.codegen.generate_c import IDS_TAG, TEXT_TAG, write_generation_program
    from mico.targets.io import TAIL, exit_status, require_tools, run_make

    directory = Path(project.directory)
    source = write_generation_program(
        directory, project.name, prompt_ids, tokens, sampler, vocab, seq_len, token_text
    )
    model_sources = [f for f in project.files if f.endswith(".c") and f != "main.c"]
    srcs = "SRCS=" + " ".join([*model_sources, source])
    if target == "host":
        from mico.targets import host

        require_tools("host", host.TOOLS)
        exe = "lm_generate"
        run_make(project, ["TARGET=host", srcs, f"EXE={exe}"], 300, f"building {source}")
        command = [str(directory / exe)]
    else:
        from mico.targets import rv32

        require_tools("rv32", rv32.TOOLS)
        exe = "lm_generate.elf"
        run_make(project, ["TARGET=rv32", srcs, f"EXE={exe}"], 300, f"building {source}")
        command = [*shlex.split(rv32.QEMU_RV32), "-kernel", str(directory / exe)]
    try:
        done = subprocess.run(command, cwd=directory, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(
            f"the generation program ran for more than {timeout:g} s on {target} and was "
            "stopped; ask for fewer --tokens"
        ) from None
    console = done.stdout + done.stderr  # qemu's semihosting console is stderr
    if done.returncode != 0:
        raise BuildError(
            f"the generation program failed on {target} ({exit_status(done.returncode)}):\n"
            f"{console.decode('utf-8', 'replace')[-TAIL:]}"
        )
    ids_line = next((ln for ln in console.splitlines() if ln.startswith(IDS_TAG.encode())), None)
    text_line = next((ln for ln in console.splitlines() if ln.startswith(TEXT_TAG.encode())), b"")
    if ids_line is None:
        raise BuildError(f"the generation program on {target} printed no {IDS_TAG} line")
    ids = [int(t) for t in ids_line[len(IDS_TAG) :].split()]
    return ids, text_line[len(TEXT_TAG) + 1 :]


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
