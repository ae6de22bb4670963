"""``python -m qkwh``: the same as the ``qkwh`` command."""

from qkwh.cli import main

main()
