"""``python -m qkwh.cli``: the same as the ``qkwh`` command."""

from qkwh.cli import app

app(prog_name="qkwh")
