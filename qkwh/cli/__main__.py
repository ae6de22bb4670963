"""``python -m qkwh.cli``: the same as the ``qkwh`` command."""

from qkwh.cli import main

main()
