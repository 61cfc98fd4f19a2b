"""mico's exception hierarchy.

Every error a user can cause is a :class:`MicoError` whose message names the thing that was
wrong, the form that was expected, and how to fix it. Subclasses also derive from the built-in
exception a Python user would expect (``ValueError``, ``KeyError``…), so generic handlers work.
"""

from __future__ import annotations


class MicoError(Exception):
    """Base class of all errors raised by mico on bad input or failed stages."""


class PlanError(MicoError, ValueError):
    """A quantization plan (per-layer bit-widths) is malformed or does not fit the model."""


class UnknownModelError(MicoError, KeyError):
    """A model name is not in the model registry."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class DatasetError(MicoError, ValueError):
    """A dataset is missing, corrupt or has an unexpected format."""


class UnsupportedOpError(MicoError, NotImplementedError):
    """The graph contains an operator mico has no rule for."""


class RegistryError(MicoError, ValueError):
    """An operator or module registration is invalid (missing fields, duplicate name…)."""


class CalibrationError(MicoError, RuntimeError):
    """Quantization was requested before the activation ranges were calibrated."""


class CompileError(MicoError, RuntimeError):
    """Lowering the IR or emitting C failed."""


class BuildError(MicoError, RuntimeError):
    """The C toolchain failed to build or run a generated project."""


class VerificationError(MicoError, AssertionError):
    """The C program disagrees with the Python reference."""


class CheckpointError(MicoError, ValueError):
    """A checkpoint is missing, corrupt, from a newer mico, or belongs to another model."""


class TypeDeductionError(MicoError, TypeError):
    """An operator was applied to arguments of the wrong kind, count, shape or data type."""


class OutputError(MicoError, OSError):
    """An output path cannot be written, holds files mico did not write, or is in use."""


class WeightsFileError(MicoError, ValueError):
    """A weights file is not mico's, is truncated or corrupt, or belongs to another project."""


class ConfigError(MicoError, ValueError):
    """A model or run config is malformed: the message names the layer or section and field."""


class InputError(MicoError, ValueError):
    """An input sample cannot be run: NaN or Inf values, or a shape the model does not take."""


class ParameterError(MicoError, ValueError):
    """A model parameter or buffer cannot be deployed: it holds NaN or Inf."""


def brief(value: object, limit: int = 80) -> str:
    """A repr of ``value`` at most ``limit`` characters long, cheap even for huge values.

    Error messages quote what the user gave; a YAML alias bomb or a multi-megabyte string must
    not make the message itself explode, so nesting and lengths are cut before formatting.
    """
    import reprlib

    shortener = reprlib.Repr()
    shortener.maxlevel = 3
    shortener.maxlist = shortener.maxtuple = shortener.maxset = shortener.maxdict = 4
    shortener.maxstring = shortener.maxother = max(limit, 8)
    shortener.repr_int = _brief_int  # type: ignore[method-assign]
    text = shortener.repr(value)
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _brief_int(value: int, level: int) -> str:
    """An integer as digits, or its size when printing it would be slow or refused."""
    del level
    if value.bit_length() > 256:
        return f"<integer of {value.bit_length()} bits>"
    return repr(value)
