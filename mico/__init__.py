"""mico: a PyTorch model to a mixed-precision quantized C program, verified bit for bit."""

from mico.errors import MicoError

__version__ = "0.1.0"

__all__ = ["MicoError", "__version__"]
