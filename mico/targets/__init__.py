"""Build and run targets: the host compiler (gcc or clang, optionally with sanitizers), rv32 bare
metal under qemu-system-riscv32 (counts instructions) and rv64 Linux under qemu-user."""

from mico.targets import host, rv32, rv64

__all__ = ["host", "rv32", "rv64"]
