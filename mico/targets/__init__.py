"""Build and run targets: the host (more arrive with later issues)."""

from mico.targets import host

__all__ = ["host"]
