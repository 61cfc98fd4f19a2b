"""Build and run targets: the host compiler (gcc or clang, optionally with sanitizers), rv32 bare
metal under qemu-system-riscv32 (counts instructions), rv64 Linux under qemu-user, and the
VexRiscv RTL core under verilator (counts cycles; ``mico.targets.vexriscv``, imported on use)."""

from mico.targets import host, rv32, rv64

__all__ = ["host", "rv32", "rv64"]
