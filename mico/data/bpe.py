"""A small byte-level BPE tokenizer: train, encode, decode, save and load (JSON).

Byte-level means the base vocabulary is the 256 byte values, so any UTF-8 text encodes and
decodes back exactly, with no unknown token. Training learns merges of frequent adjacent
pairs inside pre-tokenized chunks (words with their leading space, punctuation runs, spaces),
as GPT-2 does; ids 256.. are the merges in the order learned, then the special tokens.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path

from mico.data.paths import corrupt
from mico.errors import DatasetError

BYTE_VOCAB = 256
END_OF_TEXT = "<|endoftext|>"
FORMAT = "mico-byte-bpe"
FORMAT_VERSION = 1
# Every character matches one branch, so the chunks always concatenate back to the text.
CHUNK_PATTERN = re.compile(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+")


class ByteBPETokenizer:
    """Byte-level BPE: ``merges[i] = (a, b)`` makes token ``256 + i`` from tokens ``a, b``."""

    def __init__(
        self,
        merges: Sequence[tuple[int, int]] = (),
        special_tokens: Sequence[str] = (END_OF_TEXT,),
    ) -> None:
        self.merges: list[tuple[int, int]] = [(int(a), int(b)) for a, b in merges]
        self.vocab: list[bytes] = [bytes([i]) for i in range(BYTE_VOCAB)]
        for i, (a, b) in enumerate(self.merges):
            if not (0 <= a < BYTE_VOCAB + i and 0 <= b < BYTE_VOCAB + i):
                raise DatasetError(
                    f"BPE merge {i} ({a}, {b}) refers to a token not yet defined "
                    f"(ids below {BYTE_VOCAB + i} allowed)"
                )
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self.ranks: dict[tuple[int, int], int] = {
            p: BYTE_VOCAB + i for i, p in enumerate(self.merges)
        }
        if len(set(special_tokens)) != len(special_tokens) or "" in special_tokens:
            raise DatasetError(f"special tokens must be distinct and non-empty: {special_tokens}")
        self.special_tokens: dict[str, int] = {
            tok: len(self.vocab) + i for i, tok in enumerate(special_tokens)
        }
        self._special_bytes = {i: tok.encode("utf-8") for tok, i in self.special_tokens.items()}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of token ids: 256 bytes + merges + special tokens."""
        return len(self.vocab) + len(self.special_tokens)

    @property
    def eot_id(self) -> int:
        """Id of ``<|endoftext|>``, the separator between documents."""
        if END_OF_TEXT not in self.special_tokens:
            raise DatasetError(f"this tokenizer has no {END_OF_TEXT} token")
        return self.special_tokens[END_OF_TEXT]

    @classmethod
    def train(
        cls,
        texts: str | Iterable[str],
        vocab_size: int = 512,
        special_tokens: Sequence[str] = (END_OF_TEXT,),
    ) -> ByteBPETokenizer:
        """Learn merges until the vocabulary (bytes + merges + specials) has ``vocab_size`` ids.

        Training stops early when no adjacent pair is left to merge (tiny corpora), so the
        result may be smaller; check :attr:`vocab_size`. Ties go to the smallest pair.
        """
        num_merges = vocab_size - BYTE_VOCAB - len(special_tokens)
        if num_merges < 0:
            raise DatasetError(
                f"vocab_size must be at least {BYTE_VOCAB + len(special_tokens)} "
                f"(256 bytes + special tokens), got {vocab_size}"
            )
        counts: Counter[str] = Counter()
        for text in [texts] if isinstance(texts, str) else texts:
            for piece in _split_special(text, special_tokens):
                counts.update(CHUNK_PATTERN.findall(piece))
        return cls(_learn_merges(counts, num_merges), special_tokens)

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Token ids of ``text``; with ``allow_special`` special-token strings map to their ids."""
        if not allow_special or not self.special_tokens:
            return self._encode_plain(text)
        ids: list[int] = []
        pattern = "(" + "|".join(re.escape(t) for t in self.special_tokens) + ")"
        for i, piece in enumerate(re.split(pattern, text)):
            if i % 2:
                ids.append(self.special_tokens[piece])
            elif piece:
                ids.extend(self._encode_plain(piece))
        return ids

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of raw bytes, as the generated C encoder computes them (no special tokens).

        Valid UTF-8 gives the ids of :meth:`encode` on its text. A byte outside a well-formed
        UTF-8 sequence is kept as itself and chunked as punctuation (``surrogateescape``: such a
        byte reads as a lone surrogate, neither ``\\w`` nor ``\\s``), so every byte string has ids.
        """
        return self._encode_plain(bytes(data).decode("utf-8", "surrogateescape"))

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for."""
        out = bytearray()
        for token in ids:
            token = int(token)
            if 0 <= token < len(self.vocab):
                out += self.vocab[token]
            elif token in self._special_bytes:
                out += self._special_bytes[token]
            else:
                raise DatasetError(
                    f"token id {token} outside the vocabulary (0..{self.vocab_size - 1})"
                )
        return bytes(out)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; a sequence cut inside a UTF-8 character shows U+FFFD there."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tokenizer as JSON (merges and special tokens)."""
        payload = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "merges": [list(m) for m in self.merges],
            "special_tokens": list(self.special_tokens),
        }
        Path(path).write_text(json.dumps(payload), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ByteBPETokenizer:
        """Read a tokenizer written by :meth:`save`; DatasetError naming the file if invalid."""
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DatasetError(f"tokenizer file {path} does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise corrupt(path, f"not a JSON tokenizer ({error})") from error
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise corrupt(path, f"not a {FORMAT} tokenizer (missing 'format': '{FORMAT}')")
        merges, specials = payload.get("merges"), payload.get("special_tokens", [])
        valid = isinstance(merges, list) and all(
            isinstance(m, list) and len(m) == 2 and all(type(v) is int for v in m) for m in merges
        )
        if not valid or not isinstance(specials, list):
            raise corrupt(path, "'merges' must be a list of [int, int] pairs")
        try:
            return cls([tuple(m) for m in merges], [str(s) for s in specials])
        except DatasetError as error:
            raise corrupt(path, str(error)) from error

    def __repr__(self) -> str:
        return f"ByteBPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        cache = self._cache
        for chunk in CHUNK_PATTERN.findall(text):
            tokens = cache.get(chunk)
            if tokens is None:
                tokens = self._merge_chunk(list(chunk.encode("utf-8", "surrogateescape")))
                if len(cache) < 1_000_000:
                    cache[chunk] = tokens
            ids.extend(tokens)
        return ids

    def _merge_chunk(self, tokens: list[int]) -> list[int]:
        ranks = self.ranks
        while len(tokens) > 1:
            best = min(pairwise(tokens), key=lambda p: ranks.get(p, 1 << 62))
            new = ranks.get(best)
            if new is None:
                break
            tokens = _replace_pair(tokens, best, new)
        return tokens


def _split_special(text: str, special_tokens: Sequence[str]) -> list[str]:
    if not special_tokens:
        return [text]
    return re.split("|".join(re.escape(t) for t in special_tokens), text)


def _replace_pair(tokens: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out: list[int] = []
    i = 0
    while i < len(tokens):
        if i + 1 < len(tokens) and tokens[i] == pair[0] and tokens[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


def _learn_merges(counts: Counter[str], num_merges: int) -> list[tuple[int, int]]:
    """Greedy BPE on unique chunks weighted by frequency, with incremental pair counts."""
    words = [list(chunk.encode("utf-8")) for chunk in counts]
    freqs = list(counts.values())
    pair_counts: Counter[tuple[int, int]] = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, (word, freq) in enumerate(zip(words, freqs, strict=True)):
        for pair in pairwise(word):
            pair_counts[pair] += freq
            where.setdefault(pair, set()).add(w)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg or -neg <= 0:
            continue  # stale heap entry
        new = BYTE_VOCAB + len(merges)
        merges.append(pair)
        changed: set[tuple[int, int]] = set()
        for w in list(where.get(pair, ())):
            word, freq = words[w], freqs[w]
            for old in pairwise(word):
                pair_counts[old] -= freq
                changed.add(old)
            word = _replace_pair(word, pair, new)
            words[w] = word
            for fresh in pairwise(word):
                pair_counts[fresh] += freq
                where.setdefault(fresh, set()).add(w)
                changed.add(fresh)
        del pair_counts[pair]
        where.pop(pair, None)
        for p in changed:
            count = pair_counts.get(p, 0)
            if count > 0:
                heapq.heappush(heap, (-count, p))
            else:
                pair_counts.pop(p, None)
    return merges
