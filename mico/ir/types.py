"""Value types of the IR."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mico.ir.dtypes import DataType


@dataclass(frozen=True)
class TensorType:
    """A tensor of static ``shape`` and element type ``dtype``."""

    shape: tuple[int, ...]
    dtype: DataType

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"tensor dimensions must be >= 0, got {self.shape}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes in memory, one container per element."""
        return self.numel * self.dtype.container_bytes

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"
