"""Build and run targets: the host compiler and rv32 bare metal under qemu."""

from mico.targets import host, rv32

__all__ = ["host", "rv32"]
