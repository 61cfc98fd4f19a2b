"""Agreement between the C program's outputs and the Python reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    samples: int
    exact: int  # samples whose every output integer matches
    top1: int  # samples whose arg-max matches
    max_abs_diff: int

    @property
    def exact_rate(self) -> float:
        return self.exact / self.samples if self.samples else 1.0

    @property
    def top1_rate(self) -> float:
        return self.top1 / self.samples if self.samples else 1.0

    @property
    def all_exact(self) -> bool:
        return self.exact == self.samples


def compare_outputs(c_out: np.ndarray, reference: np.ndarray) -> Agreement:
    """Compare per-sample integer outputs of shape ``(N, K)``."""
    c = np.asarray(c_out, dtype=np.int64)
    ref = np.asarray(reference, dtype=np.int64)
    if c.shape != ref.shape:
        raise ValueError(f"C outputs have shape {c.shape}, the reference {ref.shape}")
    flat_c, flat_r = c.reshape(len(c), -1), ref.reshape(len(ref), -1)
    exact = int(np.all(flat_c == flat_r, axis=1).sum())
    top1 = int((flat_c.argmax(axis=1) == flat_r.argmax(axis=1)).sum())
    diff = int(np.max(np.abs(flat_c - flat_r), initial=0))
    return Agreement(len(c), exact, top1, diff)
