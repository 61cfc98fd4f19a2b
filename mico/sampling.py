"""Next-token choice shared bit for bit by Python and the C generation program.

Greedy: the most likely token (the lowest id on ties). Sampling: the ``top_k`` most likely
tokens (ties: lower id first), each weighted by ``exp(logit / temperature)`` relative to the
best, drawn with a 32-bit xorshift generator. Every step after the logits is integer or exactly
rounded float32, so Python and C pick the same token from the same logits:

- ``d = (logit - best) * scale`` in float32, ``scale = float32(log2(e) / temperature)``;
- ``q = floor(d * 256)`` (an exact float32 product), so the weight is ``2 ** (q / 256)``;
- ``q = -256 n + f`` with ``0 <= f < 256``: weight ``EXP2_LUT[f] >> n`` (``EXP2_LUT[f] =
  round(2 ** (f / 256) * 65536)``), zero beyond 16 octaves;
- ``r = xorshift32() % total``; the token is the first whose running weight exceeds ``r``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mico.errors import ConfigError

#: 2 ** (f / 256) in 16.16 fixed point, f = 0..255 (the C program gets the same table)
EXP2_LUT: tuple[int, ...] = tuple(round(2 ** (f / 256) * 65536) for f in range(256))
MAX_OCTAVES = 16  # weights below 2 ** -16 of the best are zero
DEFAULT_SEED = 0x9E3779B9


@dataclass
class Sampler:
    """How the next token is chosen: greedy (``top_k <= 1`` or ``temperature == 0``) or seeded
    top-k sampling at ``temperature``."""

    top_k: int = 1
    temperature: float = 1.0
    seed: int = 0
    #: what one logit unit is worth: 1 for float logits, the output scale for a static
    #: program's int32 logit codes (so the temperature applies to the real logits)
    logit_scale: float = 1.0

    def __post_init__(self) -> None:
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 10_000:
            raise ConfigError(f"--top-k must be an integer from 1 to 10000, got {top_k!r}")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= 100):
            raise ConfigError(f"--temperature must be from 0 to 100, got {self.temperature!r}")
        if not (math.isfinite(self.logit_scale) and self.logit_scale > 0):
            raise ConfigError(f"the logit scale must be positive, got {self.logit_scale!r}")
        if not 0 <= int(self.seed) < 2**32:
            raise ConfigError(f"--sample-seed must be from 0 to 2**32 - 1, got {self.seed!r}")
        self.state = int(self.seed) or DEFAULT_SEED

    @property
    def greedy(self) -> bool:
        return self.top_k <= 1 or self.temperature == 0

    @property
    def scale(self) -> np.float32:
        """log2(e) * logit_scale / temperature, rounded to float32 (the C program gets this
        exact value)."""
        if self.greedy:
            return np.float32(0)
        return np.float32(math.log2(math.e) * self.logit_scale / self.temperature)

    def next_random(self) -> int:
        """xorshift32 (13, 17, 5): the same sequence as the C program's."""
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.state = x
        return x

    def pick(self, logits: np.ndarray) -> int:
        """The next token from one position's logits (float32, one per vocabulary entry)."""
        row = np.asarray(logits, dtype=np.float32).reshape(-1)
        if self.greedy:
            return int(np.argmax(row))  # the first of equal maxima, as the C loop's strict >
        k = min(self.top_k, row.size)
        order = sorted(range(row.size), key=lambda i: (-float(row[i]), i))[:k]
        best = row[order[0]]
        weights = []
        for i in order:
            d = np.float32(np.float32(row[i] - best) * self.scale)
            q = int(np.floor(np.float32(d * np.float32(256.0))))
            weights.append(_weight(q))
        total = sum(weights)
        r = self.next_random() % total
        running = 0
        for i, w in zip(order, weights, strict=True):
            running += w
            if running > r:
                return int(i)
        return int(order[-1])  # unreachable: the best token's weight is 65536


def _weight(q: int) -> int:
    """``2 ** (q / 256)`` in 16.16 fixed point for ``q <= 0`` (zero beyond 16 octaves)."""
    if q < -256 * MAX_OCTAVES:
        return 0
    n = (-q + 255) >> 8
    return EXP2_LUT[q + 256 * n] >> n
