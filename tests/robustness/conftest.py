"""The robustness corpus: hostile and careless inputs, each a one-line mico error.

Tests import the shared runner as ``from harness import …`` (this directory is put on the path,
since pytest runs with ``--import-mode=importlib``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
