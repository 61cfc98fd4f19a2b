"""TinyStories read from its text files, tokenized with mico's byte-level BPE into windows.

The files (``TinyStories-train.txt``, ``TinyStories-valid.txt``) hold stories separated by
``<|endoftext|>``. The full training file is about 2 GB, so only the first ``max_stories``
stories are read (streamed, not loaded whole); the tokenizer is trained on the first
``tokenizer_stories`` of them unless one is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mico.data.bpe import END_OF_TEXT, ByteBPETokenizer
from mico.data.paths import corrupt, data_root, find_dir
from mico.data.split import DatasetSplit
from mico.errors import DatasetError

STORY_FILES = ("TinyStories-train.txt", "TinyStories-valid.txt")
STORY_SUBDIRS = ("", "TinyStories", "tinystories")
_READ_BLOCK = 1 << 20  # characters read at a time while streaming stories


def iter_stories(path: str | os.PathLike[str], limit: int | None = None) -> Iterator[str]:
    """The stories of a TinyStories text file, stripped, empty ones skipped; at most ``limit``."""
    path = Path(path)
    if limit is not None and limit < 1:
        return
    count = 0
    buffer = ""
    try:
        with open(path, encoding="utf-8") as handle:
            while True:
                block = handle.read(_READ_BLOCK)
                pieces = (buffer + block).split(END_OF_TEXT)
                # the text after the last separator may continue in the next block
                buffer = pieces.pop() if block else ""
                for piece in pieces:
                    story = piece.strip()
                    if story:
                        yield story
                        count += 1
                        if count == limit:
                            return
                if not block:
                    return
    except UnicodeDecodeError as error:
        raise corrupt(path, f"not UTF-8 text ({error})") from error
    except OSError as error:
        raise corrupt(path, f"cannot read ({error})") from error


def token_windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows: inputs ``(N, seq_len)`` and the next tokens (shifted by one)."""
    if seq_len < 1:
        raise DatasetError(f"seq_len must be positive, got {seq_len}")
    count = (len(ids) - 1) // seq_len
    if count < 1:
        raise DatasetError(
            f"only {len(ids)} tokens, too few for one window of seq_len={seq_len} (+1 target)"
        )
    used = ids[: count * seq_len + 1].astype(np.int64)
    x = used[:-1].reshape(count, seq_len)
    y = used[1:].reshape(count, seq_len)
    return x.copy(), y.copy()


def read_tinystories(
    root: str | os.PathLike[str] | None = None,
    seq_len: int = 128,
    vocab_size: int = 512,
    max_stories: int | None = 20_000,
    max_test_stories: int | None = 2_000,
    tokenizer: ByteBPETokenizer | str | os.PathLike[str] | None = None,
    tokenizer_stories: int = 2_000,
) -> DatasetSplit:
    """TinyStories as int64 token windows ``(N, seq_len)`` with next-token targets ``(N, seq_len)``.

    Stories are joined with the ``<|endoftext|>`` token. ``tokenizer`` is a trained
    :class:`ByteBPETokenizer` or the path of its JSON file; otherwise one with ``vocab_size``
    ids is trained on the first ``tokenizer_stories`` training stories (save it with
    ``split.metadata['tokenizer'].save(path)`` to reuse it). ``num_classes`` is the vocabulary.
    """
    base = data_root(root)
    candidates = [base / sub if sub else base for sub in STORY_SUBDIRS]
    layout = [f"<root>/{name}" for name in STORY_FILES]
    layout.append("(or the same files in <root>/TinyStories/)")
    folder = find_dir("TinyStories", candidates, STORY_FILES, layout)
    train_path, test_path = folder / STORY_FILES[0], folder / STORY_FILES[1]
    train_stories = list(iter_stories(train_path, max_stories))
    test_stories = list(iter_stories(test_path, max_test_stories))
    for path, stories in ((train_path, train_stories), (test_path, test_stories)):
        if not stories:
            raise corrupt(path, f"holds no stories (stories are separated by {END_OF_TEXT})")
    if tokenizer is None:
        tokenizer = ByteBPETokenizer.train(train_stories[:tokenizer_stories], vocab_size)
    elif not isinstance(tokenizer, ByteBPETokenizer):
        tokenizer = ByteBPETokenizer.load(tokenizer)
    x_train, y_train = token_windows(_encode_stories(tokenizer, train_stories), seq_len)
    x_test, y_test = token_windows(_encode_stories(tokenizer, test_stories), seq_len)
    return DatasetSplit(
        "tinystories",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=tokenizer.vocab_size,
        metadata={"folder": str(folder), "tokenizer": tokenizer, "seq_len": seq_len},
    )


def _encode_stories(tokenizer: ByteBPETokenizer, stories: list[str]) -> np.ndarray:
    eot = tokenizer.eot_id
    ids: list[int] = []
    for story in stories:
        ids.extend(tokenizer.encode(story))
        ids.append(eot)
    return np.asarray(ids, dtype=np.int64)
