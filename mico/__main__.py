"""``python -m mico``: the ``mico`` command."""

from mico.cli import main

if __name__ == "__main__":
    main()
